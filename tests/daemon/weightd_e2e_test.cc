// fastrestart-weightd end to end: the real binary, real sockets, real processes.
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "common/unix_socket.h"
#include "daemon_client/daemon_client.h"
#include "fastrestart/engine_loader.h"
#include "support/harness.h"

namespace fr {
namespace {

using proto::json;

fastrestart::Options opts(const std::string& dir) {
  fastrestart::Options o;
  o.socket_dir = dir;
  o.fallback = false;
  o.connect_timeout_s = 2;
  o.state_timeout_s = 30;
  return o;
}

void expect_same_bytes(const fastrestart::Weights& w, const test::Checkpoint& ck) {
  ASSERT_EQ(w.tensors().size(), ck.tensors.size());
  for (const auto& t : w.tensors()) {
    const auto& want = ck.tensors.at(t.name);
    ASSERT_EQ(t.nbytes, want.size()) << t.name;
    EXPECT_EQ(std::memcmp(t.data, want.data(), want.size()), 0) << t.name;
  }
}

std::vector<std::string> preload_args(const test::Checkpoint& ck) {
  std::vector<std::string> a;
  for (const auto& f : ck.files) a.insert(a.end(), {"--preload", f});
  a.insert(a.end(), {"--config", "arch=test"});
  return a;
}

fastrestart::Key key_of(const test::Checkpoint& ck) { return {ck.files, {{"arch", "test"}}}; }

TEST(Weightd, PreloadThenAttachGivesTheFileBytesReadOnly) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 2, 4, 200000, 1);
  test::Daemon daemon(d / "run", preload_args(ck));
  auto r = fastrestart::attach(key_of(ck), opts(d / "run"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->hit) << r->reason;
  expect_same_bytes(*r->weights, ck);
  EXPECT_EQ(r->weights->mode(), fastrestart::Mode::kZeroCopy);

  // A write through the zero_copy mapping faults, in the writer only (child process).
  void* p = r->weights->tensors()[0].data;
  pid_t pid = ::fork();
  if (pid == 0) {
    *static_cast<volatile char*>(p) = 1;
    _exit(0);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV) << "write through a read-only mapping must fault";
  expect_same_bytes(*r->weights, ck);
  EXPECT_EQ(daemon.stop(), 0);
}

TEST(Weightd, PublishThenAttach) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 3, 50000, 2);
  test::Daemon daemon(d / "run");
  auto miss = fastrestart::attach(key_of(ck), [&] { auto o = opts(d / "run"); o.fallback = true; return o; }());
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss->hit);
  EXPECT_EQ(miss->reason, "no entries");

  // "Post-processed" tensors: not the file's bytes, so a hit proves they came from the publish.
  std::map<std::string, std::vector<std::byte>> processed;
  std::vector<fastrestart::PublishTensor> ts;
  for (auto& [name, bytes] : ck.tensors) {
    auto& b = processed[name] = bytes;
    for (auto& x : b) x = std::byte(static_cast<unsigned char>(x) ^ 0x5a);
    ts.push_back({name, "F32", {static_cast<int64_t>(b.size() / 4)}, b.data()});
  }
  auto pub = fastrestart::publish(miss->key, ts, opts(d / "run"));  // the key of the miss, taken before the read
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  auto r = fastrestart::attach(key_of(ck), [&] { auto o = opts(d / "run"); o.verify = true; return o; }());
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->hit) << r->reason;
  EXPECT_EQ(r->weights->digest(), pub->digest);
  for (const auto& t : r->weights->tensors())
    EXPECT_EQ(std::memcmp(t.data, processed.at(t.name).data(), t.nbytes), 0) << t.name;
  // Publishing the same key again is refused until evicted.
  auto again = fastrestart::publish(miss->key, ts, opts(d / "run"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, Errc::kBusy);
}

// Publish mode across checkpoint updates: each update is published under its files' new identities, and
// the entry of the files it replaced can never be attached again (an attach identifies the files anew), so
// the daemon drops it instead of holding one pool per update.
TEST(Weightd, PublishAfterTheCheckpointChangedDropsTheReplacedEntry) {
  test::TempDir d;
  test::Daemon daemon(d / "run");
  auto publish_current = [&](uint64_t seed) {
    auto ck = test::make_checkpoint(d.path(), 1, 2, 50000, seed);  // rewrites model-1.safetensors
    auto miss = fastrestart::attach(key_of(ck), [&] { auto o = opts(d / "run"); o.fallback = true; return o; }());
    ASSERT_TRUE(miss.ok()) << miss.error().message;
    ASSERT_FALSE(miss->hit);
    std::vector<fastrestart::PublishTensor> ts;
    for (auto& [name, bytes] : ck.tensors) ts.push_back({name, "F32", {static_cast<int64_t>(bytes.size() / 4)}, bytes.data()});
    auto pub = fastrestart::publish(miss->key, ts, opts(d / "run"));
    ASSERT_TRUE(pub.ok()) << pub.error().message;
    auto hit = fastrestart::attach(key_of(ck), opts(d / "run"));
    ASSERT_TRUE(hit.ok() && hit->hit);
  };
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    ASSERT_NO_FATAL_FAILURE(publish_current(seed));
    // The update as a training job writes it: a new file renamed over the old one (a new inode, whatever
    // the clock's resolution), whose bytes the next round rewrites.
    test::replace_by_rename(d / "model-1.safetensors");
  }
  auto st = test::run({test::weightctl(), "--socket-dir", d / "run", "status", "--json"});
  ASSERT_EQ(st.exit_code, 0) << st.output;
  auto j = json::parse(st.output);
  EXPECT_EQ(j["entries"].size(), 1u) << st.output;
  EXPECT_EQ(j["stale_dropped"], 3) << st.output;
}

TEST(Weightd, EightConcurrentAttaches) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 2, 3, 100000, 3);
  test::Daemon daemon(d / "run", preload_args(ck));
  std::vector<std::thread> threads;
  std::atomic<int> hits{0};
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      auto r = fastrestart::attach(key_of(ck), opts(d / "run"));
      if (r.ok() && r->hit) {
        bool same = true;
        for (const auto& t : r->weights->tensors()) same &= std::memcmp(t.data, ck.tensors.at(t.name).data(), t.nbytes) == 0;
        if (same) ++hits;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(hits.load(), 8);
  auto st = test::run({test::weightctl(), "--socket-dir", d / "run", "status", "--json"});
  ASSERT_EQ(st.exit_code, 0) << st.output;
  EXPECT_EQ(json::parse(st.output)["entries"][0]["attaches"].size(), 8u);
}

TEST(Weightd, AttachWhilePreloadingWaitsThenHits) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 2, 100000, 4);
  auto args = preload_args(ck);
  args.insert(args.end(), {"--test-read-delay-ms", "1500"});
  test::Daemon daemon(d / "run", args);
  auto st = test::run({test::weightctl(), "--socket-dir", d / "run", "status", "--json"});
  EXPECT_EQ(json::parse(st.output)["entries"][0]["state"], "loading");
  auto r = fastrestart::attach(key_of(ck), opts(d / "run"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->hit) << r->reason;
  EXPECT_GT(r->timings.request_s, 0.5) << "the daemon should have held the request until the load finished";
  expect_same_bytes(*r->weights, ck);
}

TEST(Weightd, AttachGivesUpAfterStateTimeout) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 1, 1000, 5);
  auto args = preload_args(ck);
  args.insert(args.end(), {"--test-read-delay-ms", "3000"});
  test::Daemon daemon(d / "run", args);
  auto o = opts(d / "run");
  o.fallback = true;
  o.state_timeout_s = 0.3;
  auto r = fastrestart::attach(key_of(ck), o);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->hit);
  EXPECT_NE(r->reason.find("did not finish"), std::string::npos) << r->reason;
}

TEST(Weightd, MappingSurvivesKill9OfTheDaemon) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 3, 300000, 6);
  test::Daemon daemon(d / "run", preload_args(ck));
  auto r = fastrestart::attach(key_of(ck), opts(d / "run"));
  ASSERT_TRUE(r.ok() && r->hit);
  EXPECT_EQ(daemon.stop(SIGKILL), 128 + SIGKILL);
  expect_same_bytes(*r->weights, ck);
  // A new daemon can take over: it removes the stale socket under its lock.
  test::Daemon again(d / "run");
  EXPECT_NE(again.log().find("removed stale socket"), std::string::npos) << again.log();
}

TEST(Weightd, CopyModeOwnsItsMemory) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 2, 100000, 7);
  test::Daemon daemon(d / "run", preload_args(ck));
  auto o = opts(d / "run");
  o.mode = fastrestart::Mode::kCopy;
  auto r = fastrestart::attach(key_of(ck), o);
  ASSERT_TRUE(r.ok() && r->hit);
  auto* p = static_cast<char*>(r->weights->tensors()[0].data);
  p[0] = static_cast<char>(p[0] + 1);  // writable: it is ours
  p[0] = static_cast<char>(p[0] - 1);
  expect_same_bytes(*r->weights, ck);
}

TEST(Weightd, SecondDaemonForTheSameDeviceFailsFast) {
  test::TempDir d;
  test::Daemon first(d / "run");
  auto t0 = std::chrono::steady_clock::now();
  auto r = test::run({test::weightd(), "--backend", "host", "--socket-dir", d / "run"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("another daemon holds"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(std::to_string(first.pid())), std::string::npos) << r.output;
}

TEST(Weightd, SigtermReleasesEverythingAndExitsZero) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 1, 1000, 8);
  test::Daemon daemon(d / "run", preload_args(ck));
  EXPECT_EQ(daemon.stop(SIGTERM), 0) << daemon.log();
  struct stat st {};
  EXPECT_NE(::stat((d / "run/weightd-host.sock").c_str(), &st), 0);
  EXPECT_NE(::stat((d / "run/weightd-host.lock").c_str(), &st), 0);
}

TEST(Weightd, CorruptCheckpointIsRejectedWithTheFileNamed) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 2, 1, 1000, 9);
  ASSERT_EQ(::truncate(ck.files[1].c_str(), 200), 0);
  test::Daemon daemon(d / "run");
  auto r = test::run({test::weightctl(), "--socket-dir", d / "run", "preload", ck.files[0], ck.files[1]});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(ck.files[1]), std::string::npos) << r.output;
  // And at start: the daemon refuses the flag with exit code 2.
  auto s = test::run({test::weightd(), "--backend", "host", "--socket-dir", d / "run2", "--preload", ck.files[1]});
  EXPECT_EQ(s.exit_code, 2) << s.output;
  EXPECT_NE(s.output.find(ck.files[1]), std::string::npos) << s.output;
}

// Raw protocol abuse: each bad connection gets an error, and the daemon keeps serving others.
class RawClient {
 public:
  explicit RawClient(const std::string& sock) {
    auto fd = connect_unix(sock, deadline_in(2));
    EXPECT_TRUE(fd.ok());
    m_fd = std::move(*fd);
    auto hello = proto::read_frame(m_fd.get(), deadline_in(2));
    EXPECT_TRUE(hello.ok());
    EXPECT_TRUE(proto::write_frame(m_fd.get(), {{"op", "hello"}, {"protocol", 1}}, -1, deadline_in(2)).ok());
  }
  void send_raw(const std::string& bytes) { ASSERT_EQ(::write(m_fd.get(), bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size())); }
  json request(const json& j) {
    EXPECT_TRUE(proto::write_frame(m_fd.get(), j, -1, deadline_in(2)).ok());
    return reply();
  }
  json reply() {
    auto f = proto::read_frame(m_fd.get(), deadline_in(5));
    EXPECT_TRUE(f.ok()) << f.error().message;
    return f.ok() ? f->body : json();
  }
  bool closed() {
    auto f = proto::read_frame(m_fd.get(), deadline_in(5));
    return !f.ok() && f.error().code == Errc::kCancelled;
  }
  int fd() const { return m_fd.get(); }

 private:
  UniqueFd m_fd;
};

std::string be32(uint32_t n) {
  return {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8), static_cast<char>(n)};
}

TEST(Weightd, MalformedAndOversizedMessages) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 1, 1000, 10);
  test::Daemon daemon(d / "run", preload_args(ck));
  RawClient bystander(daemon.socket());

  {  // oversized length: error reply, then the connection is closed
    RawClient c(daemon.socket());
    c.send_raw(be32(0xffffffffu));
    auto r = c.reply();
    EXPECT_EQ(r["error"]["code"], "protocol");
    EXPECT_TRUE(c.closed());
  }
  {  // not JSON
    RawClient c(daemon.socket());
    c.send_raw(be32(5) + "{{{{{");
    EXPECT_EQ(c.reply()["error"]["code"], "protocol");
    EXPECT_TRUE(c.closed());
  }
  {  // well framed but wrong: error reply naming the field, connection stays usable
    RawClient c(daemon.socket());
    EXPECT_EQ(c.request({{"op", "nonsense"}})["error"]["code"], "protocol");
    auto r = c.request({{"op", "attach"}, {"key", {{"files", {{{"path", "/x"}, {"dev", "one"}}}}}}});
    EXPECT_EQ(r["error"]["code"], "invalid_argument");
    EXPECT_EQ(r["error"]["message"], "attach.key.files[0].dev: not an unsigned integer");
    r = c.request({{"op", "attach"}, {"key", {{"files", json::array()}}}, {"wait_s", -1}});
    EXPECT_NE(r["error"]["message"].get<std::string>().find("wait_s"), std::string::npos);
    r = c.request({{"op", "preload"}, {"files", {42}}});
    EXPECT_NE(r["error"]["message"].get<std::string>().find("preload.files[0]"), std::string::npos);
    r = c.request({{"op", "evict"}, {"fingerprint", "0000000000000000"}});
    EXPECT_EQ(r["error"]["code"], "not_found");
    r = c.request({{"op", "status"}, {"id", 42}});
    EXPECT_EQ(r["ok"], true);
    EXPECT_EQ(r["id"], 42);
  }
  {  // a request carrying a descriptor
    RawClient c(daemon.socket());
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    ASSERT_TRUE(proto::write_frame(c.fd(), {{"op", "status"}}, p[0], deadline_in(2)).ok());
    EXPECT_EQ(c.reply()["error"]["code"], "protocol");
    ::close(p[0]);
    ::close(p[1]);
  }
  // The daemon still serves everyone else.
  EXPECT_EQ(bystander.request({{"op", "status"}})["ok"], true);
  auto r = fastrestart::attach(key_of(ck), opts(d / "run"));
  ASSERT_TRUE(r.ok() && r->hit);
}

TEST(Weightd, EvictAndShutdownThroughTheCli) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 2, 10000, 11);
  test::Daemon daemon(d / "run", preload_args(ck));
  auto a = fastrestart::attach(key_of(ck), opts(d / "run"));
  ASSERT_TRUE(a.ok() && a->hit);
  auto ev = test::run({test::weightctl(), "--socket-dir", d / "run", "evict", "--all"});
  ASSERT_EQ(ev.exit_code, 0) << ev.output;
  EXPECT_EQ(json::parse(ev.output)["evicted"], 1);
  expect_same_bytes(*a->weights, ck);  // our mapping holds the memory
  auto miss = test::run({test::weightctl(), "--socket-dir", d / "run", "attach", ck.files[0], "--config", "arch=test"});
  EXPECT_EQ(miss.exit_code, 5) << miss.output;
  auto sd = test::run({test::weightctl(), "--socket-dir", d / "run", "shutdown"});
  EXPECT_EQ(sd.exit_code, 0);
  EXPECT_EQ(daemon.stop(0), 0);  // already exiting; signal 0 only waits
}

// make-checkpoint DIR creates DIR and its parents (mkdir -p), as `gen --out` of the tiny engine does.
TEST(Weightctl, MakeCheckpointCreatesAMissingDirectory) {
  test::TempDir d;
  const std::string dir = d / "a/b/model";
  auto r = test::run({test::weightctl(), "make-checkpoint", dir, "--shards", "1", "--tensors", "2", "--tensor-bytes", "4096"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  struct stat st {};
  EXPECT_EQ(::stat((dir + "/model-00001-of-00001.safetensors").c_str(), &st), 0) << r.output;
}

}  // namespace
}  // namespace fr
