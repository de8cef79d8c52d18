#include "fastrestart/engine_loader_c.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <sys/socket.h>
#include <sys/wait.h>

#include "common/unix_socket.h"

#include "support/harness.h"

namespace {

TEST(CApi, PublishThenAttach) {
  fr::test::TempDir d;
  auto ck = fr::test::make_checkpoint(d.path(), 1, 2, 4096, 5);
  fr::test::Daemon daemon(d / "run");
  std::string dir = d / "run";
  fr_options_t o;
  fr_options_init(&o);
  o.socket_dir = dir.c_str();
  o.fallback = 0;
  const char* files[] = {ck.files[0].c_str()};
  const char* config[] = {"arch=c", "tp_size=1"};
  char err[256] = {};

  fr_weights_t* w = nullptr;
  o.fallback = 1;
  fr_key_t* key = nullptr;
  ASSERT_EQ(fr_key_identify(files, 1, config, 2, &key, err, sizeof err), FR_OK) << err;
  EXPECT_EQ(std::strlen(fr_key_fingerprint(key)), 16u);
  EXPECT_EQ(fr_attach_key(key, &o, &w, err, sizeof err), FR_MISS);
  EXPECT_STREQ(err, "no entries");

  std::vector<int64_t> shape{1024};
  std::vector<float> data(1024);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) * 0.5f;
  fr_tensor_t t{"w", "F32", 1, shape.data(), nullptr, data.data(), data.size() * 4};
  ASSERT_EQ(fr_publish_key(key, &t, 1, &o, err, sizeof err), FR_OK) << err;
  fr_key_release(key);

  ASSERT_EQ(fr_attach(files, 1, config, 2, &o, &w, err, sizeof err), FR_OK) << err;
  ASSERT_EQ(fr_weights_count(w), 1u);
  fr_tensor_t got;
  ASSERT_EQ(fr_weights_tensor(w, 0, &got), FR_OK);
  EXPECT_STREQ(got.name, "w");
  EXPECT_STREQ(got.dtype, "F32");
  EXPECT_EQ(got.ndim, 1);
  EXPECT_EQ(got.strides[0], 1);
  EXPECT_EQ(std::memcmp(got.data, data.data(), 4096), 0);
  EXPECT_EQ(std::strlen(fr_weights_digest(w)), 16u);
  EXPECT_EQ(fr_weights_tensor(w, 1, &got), FR_EINVAL);
  fr_weights_release(w);

  const char* bad_config[] = {"novalue"};
  EXPECT_EQ(fr_attach(files, 1, bad_config, 1, &o, &w, err, sizeof err), FR_EINVAL);
  EXPECT_NE(std::strstr(err, "novalue"), nullptr);
}

// Snapshots without the weights through the C ABI: release keeps the address, reattach maps the daemon's
// entry there again; the agent serves the exchange (hooks called in order) and says FR_MISS without a path.
int count_hook(void* user, char*, size_t) {
  ++*static_cast<int*>(user);
  return 0;
}

int failing_hook(void*, char* err, size_t n) {
  std::snprintf(err, n, "engine busy");
  return 1;
}

std::string exchange_line(const std::string& path, const std::string& op) {
  auto conn = fr::connect_unix(path, fr::deadline_in(5));
  if (!conn.ok()) return "connect: " + conn.error().message;
  fr::UniqueFd fd = std::move(conn.value());
  const std::string line = "{\"op\":\"" + op + "\"}\n";
  EXPECT_TRUE(fr::send_all(fd.get(), line.data(), line.size(), {}, fr::deadline_in(5)).ok());
  std::string reply;
  char c;
  while (fr::recv_exact(fd.get(), &c, 1, nullptr, fr::deadline_in(5)).ok() && c != '\n') reply += c;
  return reply;
}

TEST(CApi, ReleaseReattachAndTheSnapshotAgent) {
  fr::test::TempDir d;
  auto ck = fr::test::make_checkpoint(d.path(), 1, 2, 4096, 5);
  fr::test::Daemon daemon(d / "run");
  std::string dir = d / "run";
  fr_options_t o;
  fr_options_init(&o);
  o.socket_dir = dir.c_str();
  const char* files[] = {ck.files[0].c_str()};
  const char* config[] = {"arch=c"};
  char err[256] = {};
  std::vector<int64_t> shape{1024};
  std::vector<float> data(1024, 2.5f);
  fr_tensor_t t{"w", "F32", 1, shape.data(), nullptr, data.data(), data.size() * 4};
  fr_key_t* key = nullptr;
  ASSERT_EQ(fr_key_identify(files, 1, config, 1, &key, err, sizeof err), FR_OK) << err;
  ASSERT_EQ(fr_publish_key(key, &t, 1, &o, err, sizeof err), FR_OK) << err;
  fr_key_release(key);
  fr_weights_t* w = nullptr;
  ASSERT_EQ(fr_attach(files, 1, config, 1, &o, &w, err, sizeof err), FR_OK) << err;
  fr_tensor_t got;
  ASSERT_EQ(fr_weights_tensor(w, 0, &got), FR_OK);
  void* before = got.data;
  ASSERT_EQ(fr_weights_release_mapping(w, err, sizeof err), FR_OK) << err;
  ASSERT_EQ(fr_weights_reattach(w, err, sizeof err), FR_OK) << err;
  ASSERT_EQ(fr_weights_tensor(w, 0, &got), FR_OK);
  EXPECT_EQ(got.data, before);
  EXPECT_EQ(std::memcmp(got.data, data.data(), 4096), 0);

  fr_snapshot_agent_t* agent = nullptr;
  ::unsetenv("FASTRESTART_SNAPSHOT_SOCKET");
  EXPECT_EQ(fr_snapshot_agent_start(&w, 1, nullptr, nullptr, nullptr, nullptr, &agent, err, sizeof err), FR_MISS);
  EXPECT_EQ(agent, nullptr);
  const std::string sock = d / "x.sock";
  int calls = 0;
  ASSERT_EQ(fr_snapshot_agent_start(&w, 1, count_hook, count_hook, &calls, sock.c_str(), &agent, err, sizeof err), FR_OK) << err;
  const std::string prepared = exchange_line(sock, "prepare");
  EXPECT_NE(prepared.find("\"mapped\":false"), std::string::npos) << prepared;
  const std::string resumed = exchange_line(sock, "resume");
  EXPECT_NE(resumed.find("\"mapped\":true"), std::string::npos) << resumed;
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(std::memcmp(got.data, data.data(), 4096), 0);
  fr_snapshot_agent_stop(agent);

  // A quiesce hook that fails refuses the prepare with its message; nothing is released.
  ASSERT_EQ(fr_snapshot_agent_start(&w, 1, failing_hook, nullptr, nullptr, sock.c_str(), &agent, err, sizeof err), FR_OK) << err;
  const std::string refused = exchange_line(sock, "prepare");
  EXPECT_NE(refused.find("engine busy"), std::string::npos) << refused;
  EXPECT_EQ(std::memcmp(got.data, data.data(), 4096), 0);
  fr_snapshot_agent_stop(agent);
  fr_weights_release(w);
}

// The key is taken before the read; a file replaced before the publish is refused, naming it, and the
// daemon stores nothing under either identity.
TEST(CApi, PublishRefusesAFileChangedAfterItsKeyWasTaken) {
  fr::test::TempDir d;
  auto ck = fr::test::make_checkpoint(d.path(), 1, 2, 4096, 5);
  fr::test::Daemon daemon(d / "run");
  std::string dir = d / "run";
  fr_options_t o;
  fr_options_init(&o);
  o.socket_dir = dir.c_str();
  const char* files[] = {ck.files[0].c_str()};
  const char* config[] = {"arch=c"};
  char err[512] = {};
  fr_key_t* key = nullptr;
  ASSERT_EQ(fr_key_identify(files, 1, config, 1, &key, err, sizeof err), FR_OK) << err;
  fr::test::replace_by_rename(ck.files[0]);
  std::vector<int64_t> shape{4};
  float data[4] = {1, 2, 3, 4};
  fr_tensor_t t{"w", "F32", 1, shape.data(), nullptr, data, sizeof data};
  EXPECT_EQ(fr_publish_key(key, &t, 1, &o, err, sizeof err), FR_EFAIL);
  EXPECT_NE(std::strstr(err, ck.files[0].c_str()), nullptr) << err;
  EXPECT_NE(std::strstr(err, "ino differs"), nullptr) << err;
  fr_key_release(key);
  fr_weights_t* w = nullptr;
  EXPECT_EQ(fr_attach(files, 1, config, 1, &o, &w, err, sizeof err), FR_MISS);
  EXPECT_STREQ(err, "no entries");
}

// The standby gate through the C ABI: passes without the variable, FR_EINVAL naming a bad level or
// variable, and FR_STANDBY_RELEASED in a child released over a real socket pair.
TEST(CApi, StandbyGate) {
  char err[256] = {};
  ::unsetenv("FASTRESTART_STANDBY_FD");
  EXPECT_EQ(fr_is_standby(), 0);
  EXPECT_EQ(fr_standby_gate("pre_gpu", err, sizeof err), FR_STANDBY_PASSED) << err;
  EXPECT_EQ(fr_standby_gate("later", err, sizeof err), FR_EINVAL);
  EXPECT_NE(std::strstr(err, "\"later\""), nullptr) << err;
  EXPECT_EQ(fr_standby_gate(nullptr, err, sizeof err), FR_EINVAL);

  ::setenv("FASTRESTART_STANDBY_FD", "nine", 1);
  ::setenv("FASTRESTART_STANDBY_LEVEL", "warmed", 1);
  EXPECT_EQ(fr_is_standby(), 1);
  EXPECT_EQ(fr_standby_gate("warmed", err, sizeof err), FR_EINVAL);
  EXPECT_STREQ(err, "FASTRESTART_STANDBY_FD=nine: not a file descriptor number");

  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  ::setenv("FASTRESTART_STANDBY_FD", std::to_string(sv[1]).c_str(), 1);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(sv[0]);
    char e[256];
    const int rc = fr_standby_gate("warmed", e, sizeof e);
    ::_exit(rc == FR_STANDBY_RELEASED && fr_is_standby() == 0 && !std::getenv("FASTRESTART_STANDBY_LEVEL") ? 0 : 10 + rc);
  }
  ::close(sv[1]);
  ::unsetenv("FASTRESTART_STANDBY_FD");
  ::unsetenv("FASTRESTART_STANDBY_LEVEL");
  fr::UniqueFd sup(sv[0]);
  std::string parked;
  char c;
  while (fr::recv_exact(sup.get(), &c, 1, nullptr, fr::deadline_in(30)).ok() && c != '\n') parked += c;
  EXPECT_NE(parked.find("\"op\":\"parked\""), std::string::npos) << parked;
  const std::string release = "{\"op\":\"release\"}\n";
  ASSERT_TRUE(fr::send_all(sup.get(), release.data(), release.size(), {}, fr::deadline_in(5)).ok());
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

}  // namespace
