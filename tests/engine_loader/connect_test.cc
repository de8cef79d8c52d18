// Finding the daemon (docs/protocol.md, "Transport"): a missing one is a fast miss with the reason; a
// starting one (its lock held) is waited for; the socket directory defaults to $FASTRESTART_SOCKET_DIR.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <future>
#include <thread>

#include "common/private_dir.h"
#include "daemon_client/daemon_client.h"
#include "fastrestart/engine_loader.h"
#include "support/harness.h"

namespace fr {
namespace {

fastrestart::Options patient(const std::string& dir) {
  fastrestart::Options o;
  o.socket_dir = dir;
  o.connect_timeout_s = 600;  // a retry loop would spend all of it; a fast miss spends none
  return o;
}

fastrestart::Key key_of(const test::Checkpoint& ck) { return {ck.files, {{"arch", "test"}}}; }

TEST(EngineLoaderConnect, NoSocketIsAFastMissNamingIt) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 1, 1024, 1);
  ::mkdir((d / "run").c_str(), 0700);
  const uint64_t retries = DaemonClient::connect_retries();
  auto r = fastrestart::attach(key_of(ck), patient(d / "run"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->hit);
  EXPECT_NE(r->reason.find("weightd-host.sock does not exist and no daemon is starting"), std::string::npos) << r->reason;
  EXPECT_EQ(DaemonClient::connect_retries(), retries);
  // The publish that follows a miss is as quick to give up.
  std::vector<float> data(4, 1.0f);
  std::vector<fastrestart::PublishTensor> ts{{"w", "F32", {4}, data.data()}};
  auto pub = fastrestart::publish(r->key, ts, patient(d / "run"));
  ASSERT_FALSE(pub.ok());
  EXPECT_EQ(pub.error().code, Errc::kNotFound);
  EXPECT_EQ(DaemonClient::connect_retries(), retries);
}

TEST(EngineLoaderConnect, AStaleSocketWithoutALockHolderIsAFastMiss) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 1, 1024, 1);
  ::mkdir((d / "run").c_str(), 0700);
  {  // a socket file nobody listens on: what a daemon killed with SIGKILL leaves
    UniqueFd s(::socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string p = d / "run/weightd-host.sock";
    std::strncpy(a.sun_path, p.c_str(), sizeof a.sun_path - 1);
    ASSERT_EQ(::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  }
  const uint64_t retries = DaemonClient::connect_retries();
  auto r = fastrestart::attach(key_of(ck), patient(d / "run"));
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->reason.find("refuses connections and no daemon holds"), std::string::npos) << r->reason;
  EXPECT_EQ(DaemonClient::connect_retries(), retries);
}

// A daemon that holds its lock but is not listening yet is waited for, and then answers.
TEST(EngineLoaderConnect, AStartingDaemonIsWaitedFor) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 1, 1024, 1);
  ::mkdir((d / "run").c_str(), 0700);
  auto lock = LockFile::acquire(d / "run/weightd-host.lock");  // as a daemon does before it binds
  ASSERT_TRUE(lock.ok());
  const uint64_t retries = DaemonClient::connect_retries();
  auto fut = std::async(std::launch::async, [&] { return fastrestart::attach(key_of(ck), patient(d / "run")); });
  while (DaemonClient::connect_retries() == retries) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  *lock = LockFile();  // the "starting daemon" goes; the real one takes over
  test::Daemon daemon(d / "run");
  auto r = fut.get();
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->reason, "no entries");  // the daemon's answer
}

TEST(EngineLoaderConnect, SocketDirDefaultsToTheEnvironment) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 1, 1024, 1);
  test::Daemon daemon(d / "run");
  ::setenv("FASTRESTART_SOCKET_DIR", (d / "run").c_str(), 1);
  auto path = fastrestart::daemon_socket_path("host", "");
  fastrestart::Options o;
  o.connect_timeout_s = 600;
  auto r = fastrestart::attach(key_of(ck), o);
  fastrestart::Options other = o;
  other.socket_dir = d / "elsewhere";  // an explicit directory wins
  auto explicit_dir = fastrestart::daemon_socket_path("host", other.socket_dir);
  ::unsetenv("FASTRESTART_SOCKET_DIR");
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(*path, daemon.socket());
  ASSERT_TRUE(explicit_dir.ok());
  EXPECT_EQ(*explicit_dir, d / "elsewhere/weightd-host.sock");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->reason, "no entries");  // the daemon's answer, not a missing socket
  EXPECT_EQ(r->daemon_gpu_uuid, "host");
}

}  // namespace
}  // namespace fr
