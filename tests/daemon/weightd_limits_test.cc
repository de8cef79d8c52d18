// What idle, slow, malformed and racing clients can do to a fastrestart-weightd (docs/protocol.md:
// "Framing", "Frame limits and timeouts", "Connection slots", and the publish rule), against the real binary.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/unix_socket.h"
#include "daemon_client/daemon_client.h"
#include "engine_loader/key.h"
#include "fastrestart/engine_loader.h"
#include "protocol/frame.h"
#include "support/harness.h"

namespace fr {
namespace {

using proto::json;

std::string be32(uint32_t n) {
  return {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8), static_cast<char>(n)};
}

// One raw connection: the daemon's greeting is read; ours is sent only when asked.
class Conn {
 public:
  Conn(const std::string& sock, bool hello) {
    auto fd = connect_unix(sock, deadline_in(5));
    EXPECT_TRUE(fd.ok()) << (fd.ok() ? "" : fd.error().message);
    if (!fd.ok()) return;
    m_fd = std::move(*fd);
    auto h = proto::read_frame(m_fd.get(), deadline_in(5));
    EXPECT_TRUE(h.ok() && h->body.value("op", "") == "hello") << (h.ok() ? h->body.dump() : h.error().message);
    if (hello) {
      EXPECT_TRUE(proto::write_frame(m_fd.get(), {{"op", "hello"}, {"protocol", 1}}, -1, deadline_in(5)).ok());
    }
  }
  json request(const json& j) {
    EXPECT_TRUE(proto::write_frame(m_fd.get(), j, -1, deadline_in(5)).ok());
    return reply();
  }
  void send_raw(const std::string& b) { ASSERT_EQ(::send(m_fd.get(), b.data(), b.size(), MSG_NOSIGNAL), static_cast<ssize_t>(b.size())); }
  // Bytes with descriptors attached; false once the daemon closed its end (EPIPE, ECONNRESET).
  bool send_with_fds(const std::string& b, const std::vector<int>& fds) {
    return send_all(m_fd.get(), b.data(), b.size(), fds, deadline_in(5)).ok();
  }
  json reply(double timeout_s = 5) {
    auto f = proto::read_frame(m_fd.get(), deadline_in(timeout_s));
    EXPECT_TRUE(f.ok()) << f.error().message;
    return f.ok() ? f->body : json();
  }
  bool closed(double timeout_s = 5) {
    auto f = proto::read_frame(m_fd.get(), deadline_in(timeout_s));
    return !f.ok() && f.error().code == Errc::kCancelled;
  }

 private:
  UniqueFd m_fd;
};

long rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

json status(const std::string& sock) {
  auto c = DaemonClient::connect(sock, 5, "test");
  EXPECT_TRUE(c.ok());
  if (!c.ok()) return json();
  auto r = c->call({{"op", "status"}}, 5);
  EXPECT_TRUE(r.ok());
  return r.ok() ? *r : json();
}

fastrestart::Options strict(const std::string& dir) {
  fastrestart::Options o;
  o.socket_dir = dir;
  o.fallback = false;
  o.connect_timeout_s = 5;
  return o;
}

TEST(WeightdFraming, FramingErrorsInTheFirstFrameGetTheProtocolReplyAndAClose) {
  test::TempDir d;
  test::Daemon daemon(d / "run");
  {
    Conn c(daemon.socket(), /*hello=*/false);
    c.send_raw(be32(0xffffffffu));  // a 4 GiB length instead of a hello
    auto r = c.reply();
    EXPECT_EQ(r["error"]["code"], "protocol") << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find("frame length 4294967295"), std::string::npos) << r.dump();
    EXPECT_TRUE(c.closed());
  }
  {
    Conn c(daemon.socket(), false);
    c.send_raw(be32(5) + "{{{{{");
    auto r = c.reply();
    EXPECT_EQ(r["error"]["code"], "protocol") << r.dump();
    EXPECT_TRUE(c.closed());
  }
  EXPECT_EQ(status(daemon.socket())["ok"], true);
}

TEST(WeightdFraming, AFrameThatStopsArrivingTimesOut) {
  test::TempDir d;
  test::Daemon daemon(d / "run");
  Conn c(daemon.socket(), true);
  c.send_raw(be32(100) + "{\"op\":");  // 6 of 100 bytes, then nothing
  auto r = c.reply(60);
  EXPECT_EQ(r["error"]["code"], "timeout") << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("10 of 104 bytes"), std::string::npos) << r.dump();
  EXPECT_TRUE(c.closed());
}

// 64 peers announce 16 MiB frames and send one byte: the daemon holds what arrived, not what was claimed.
TEST(WeightdFraming, ClaimedLengthsDoNotPinMemory) {
  test::TempDir d;
  test::Daemon daemon(d / "run");
  const long before = rss_kib(daemon.pid());
  ASSERT_GT(before, 0);
  std::vector<std::unique_ptr<Conn>> conns;
  for (int i = 0; i < 64; ++i) {
    conns.push_back(std::make_unique<Conn>(daemon.socket(), true));
    conns.back()->send_raw(be32(16u << 20) + "{");
  }
  EXPECT_GE(status(daemon.socket())["clients"].get<int>(), 65);
  const long after = rss_kib(daemon.pid());
  // Allocating every claim would be 1 GiB; reading incrementally holds 64 KiB each at most.
  EXPECT_LT(after - before, 128 * 1024) << "VmRSS " << before << " -> " << after << " KiB";
}

// All 256 slots held by idle peers: an engine still attaches, and the longest-idle peer is told why it goes.
TEST(WeightdFraming, IdleConnectionsCannotKeepAnEngineOut) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 1, 4096, 3);
  test::Daemon daemon(d / "run", {"--preload", ck.files[0], "--config", "arch=test"});
  std::vector<std::unique_ptr<Conn>> idle;
  for (int i = 0; i < 256; ++i) {
    idle.push_back(std::make_unique<Conn>(daemon.socket(), true));
    ASSERT_EQ(idle.back()->request({{"op", "status"}})["ok"], true);  // orders their idle ages
  }
  auto r = fastrestart::attach(fastrestart::Key{ck.files, {{"arch", "test"}}}, strict(d / "run"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->hit) << r->reason;
  auto bye = idle.front()->reply();
  EXPECT_EQ(bye["error"]["code"], "busy") << bye.dump();
  EXPECT_NE(bye["error"]["message"].get<std::string>().find("to make room"), std::string::npos) << bye.dump();
  EXPECT_TRUE(idle.front()->closed());
}

// docs/reliability.md, "Limits on what a peer sends": the frame that killed the daemon with SIGSEGV (an id
// nested two million deep, 4 MiB) is answered with the limit it passed; the daemon lives on.
TEST(WeightdLimits, ADeeplyNestedFrameGetsAnErrorAndTheDaemonLives) {
  test::TempDir d;
  test::Daemon daemon(d / "run");
  Conn c(daemon.socket(), true);
  const std::string payload = "{\"op\":\"status\",\"id\":" + std::string(2'000'000, '[') + std::string(2'000'000, ']') + "}";
  c.send_raw(be32(static_cast<uint32_t>(payload.size())) + payload);
  auto r = c.reply(60);
  EXPECT_EQ(r["error"]["code"], "protocol") << r.dump();
  EXPECT_EQ(r["error"]["message"], "frame nests deeper than 32 levels") << r.dump();
  EXPECT_TRUE(c.closed());
  EXPECT_EQ(::kill(daemon.pid(), 0), 0) << daemon.log();
  EXPECT_EQ(status(daemon.socket())["ok"], true) << daemon.log();
}

TEST(WeightdLimits, AFrameOfTooManyTinyValuesGetsAnError) {
  test::TempDir d;
  test::Daemon daemon(d / "run");
  Conn c(daemon.socket(), true);
  std::string payload = "{\"op\":\"status\",\"id\":[0";
  for (int i = 0; i < (1 << 21); ++i) payload += ",0";
  payload += "]}";
  c.send_raw(be32(static_cast<uint32_t>(payload.size())) + payload);
  auto r = c.reply(60);
  EXPECT_EQ(r["error"]["message"], "frame holds more than 2097152 values") << r.dump();
  EXPECT_TRUE(c.closed());
  EXPECT_EQ(status(daemon.socket())["ok"], true) << daemon.log();
}

// Descriptors sent with the pieces of one frame that never completes: the daemon ends the frame at the
// second one, closes them and the connection. The descriptors sent are of a file of the test's own, so
// the check counts exactly them, whatever else the daemon opens or closes meanwhile (an instrumented
// daemon still finishing its start, the readiness probe's connection).
TEST(WeightdLimits, DescriptorsSentWithThePiecesOfOneFrameAreClosedAtOnce) {
  test::TempDir d;
  test::Daemon daemon(d / "run");
  const std::filesystem::path marker = std::filesystem::path(d.path()) / "sent-descriptor";
  { std::ofstream(marker) << "x"; }
  UniqueFd sent_fd(::open(marker.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(sent_fd.valid());
  // The count can see such a descriptor at all: the test's own is one (else the check below is vacuous).
  ASSERT_EQ(test::fds_open_on(::getpid(), marker), 1);
  const std::vector<int> four(4, sent_fd.get());
  {
    Conn c(daemon.socket(), true);
    // A frame of 1 MiB announced, then one byte at a time, each with four descriptors. Once the daemon has
    // closed the connection our sends fail (EPIPE or ECONNRESET): that is the expected end.
    bool sent = c.send_with_fds(be32(1u << 20) + "{", four);
    for (int i = 0; i < 256 && sent; ++i) sent = c.send_with_fds(" ", four);
    auto r = c.reply(60);
    EXPECT_EQ(r["error"]["code"], "protocol") << r.dump();
    EXPECT_EQ(r["error"]["message"].get<std::string>().rfind("frame carried ", 0), 0u) << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find("at most 1 allowed"), std::string::npos) << r.dump();
  }
  // The reply was sent after the descriptors were closed; the wait only covers /proc's view catching up.
  int held = test::fds_open_on(daemon.pid(), marker);
  for (int i = 0; i < 3000 && held > 0; ++i, ::usleep(10000)) held = test::fds_open_on(daemon.pid(), marker);
  EXPECT_EQ(held, 0) << "the daemon still holds " << held << " of the descriptors sent";
  EXPECT_EQ(status(daemon.socket())["ok"], true) << daemon.log();
}

// A connection with a publish open is never evicted; its publish must commit within --publish-timeout-s.
TEST(WeightdLimits, AnUncommittedPublishIsAbortedAtItsTimeout) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 1, 4096, 6);
  test::Daemon daemon(d / "run", {"--publish-timeout-s", "1"});
  auto key = loader::identify(fastrestart::Key{ck.files, {{"arch", "test"}}});
  ASSERT_TRUE(key.ok()) << key.error().message;
  Conn c(daemon.socket(), true);
  auto begun = c.request({{"op", "publish_begin"},
                          {"key", proto::to_json(*key)},
                          {"tensors", json::array({proto::to_json(proto::TensorSpec{"w", DType::kF32, {1024}})})}});
  ASSERT_EQ(begun["ok"], true) << begun.dump();
  // Nothing more is sent: the daemon ends the publish and says why.
  auto r = c.reply(120);
  EXPECT_EQ(r["error"]["code"], "timeout") << r.dump();
  EXPECT_EQ(r["error"]["message"], "publish of " + key->fingerprint() + " not committed within 1 s (--publish-timeout-s); aborted")
      << r.dump();
  EXPECT_TRUE(c.closed());
  // The aborted publish left nothing behind.
  auto again = fastrestart::attach(fastrestart::Key{ck.files, {{"arch", "test"}}}, strict(d / "run"));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("no entries"), std::string::npos) << again.error().message;
}

// A waiting attach holds its slot too: the daemon caps its wait_s (--attach-wait-limit-s), and says so.
TEST(WeightdLimits, AnAttachWaitsNoLongerThanTheDaemonsLimit) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 1, 4096, 7);
  // Each read task sleeps 3 s first: the entry is still loading when the attach arrives.
  test::Daemon daemon(d / "run", {"--preload", ck.files[0], "--config", "arch=test", "--test-read-delay-ms", "3000",
                                  "--attach-wait-limit-s", "0"});
  auto key = loader::identify(fastrestart::Key{ck.files, {{"arch", "test"}}});
  ASSERT_TRUE(key.ok()) << key.error().message;
  Conn c(daemon.socket(), true);
  auto r = c.request({{"op", "attach"}, {"key", proto::to_json(*key)}, {"wait_s", 3600}});
  ASSERT_EQ(r["ok"], true) << r.dump();
  EXPECT_EQ(r["result"], "miss") << r.dump();
  EXPECT_EQ(r["reason"], "loading did not finish within 0 s (the daemon's --attach-wait-limit-s)") << r.dump();
}

// The publish rule: the key is taken before the read; a file that changed since is refused, naming it.
void expect_publish_refused(void (*change)(const std::string&), const std::string& field) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 2, 1, 4096, 4);
  test::Daemon daemon(d / "run");
  auto o = strict(d / "run");
  o.fallback = true;
  auto miss = fastrestart::attach(fastrestart::Key{ck.files, {{"arch", "test"}}}, o);
  ASSERT_TRUE(miss.ok());
  ASSERT_FALSE(miss->hit);
  ASSERT_EQ(miss->key.files.size(), 2u);
  // The engine "reads" both shards, then shard 1 changes before the publish arrives.
  std::vector<float> data(1024, 1.0f);
  std::vector<fastrestart::PublishTensor> ts{{"w", "F32", {1024}, data.data()}};
  change(ck.files[1]);
  auto pub = fastrestart::publish(miss->key, ts, o);
  ASSERT_FALSE(pub.ok());
  EXPECT_EQ(pub.error().code, Errc::kCorrupt);
  EXPECT_NE(pub.error().message.find(ck.files[1]), std::string::npos) << pub.error().message;
  EXPECT_NE(pub.error().message.find(field + " differs"), std::string::npos) << pub.error().message;
  // Nothing was stored, under the old identities or the new ones.
  auto old_key = fastrestart::attach(miss->key, o);
  ASSERT_TRUE(old_key.ok());
  EXPECT_EQ(old_key->reason, "no entries");
  auto now = fastrestart::attach(fastrestart::Key{ck.files, {{"arch", "test"}}}, o);
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->reason, "no entries");
  EXPECT_NE(daemon.log().find("changed after the engine identified it"), std::string::npos) << daemon.log();
}

TEST(WeightdPublish, RefusesAFileRenamedOverAfterTheKeyWasTaken) { expect_publish_refused(test::replace_by_rename, "ino"); }

TEST(WeightdPublish, RefusesAnInPlaceRewriteWithTheMtimeRestored) {
  expect_publish_refused(test::rewrite_in_place_keeping_mtime, "ctime_ns");
}

TEST(WeightdPublish, AnUnchangedKeyTakenBeforeTheReadIsPublished) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 1, 4096, 5);
  test::Daemon daemon(d / "run");
  auto key = fastrestart::identify(fastrestart::Key{ck.files, {{"arch", "test"}}});
  ASSERT_TRUE(key.ok());
  std::vector<float> data(1024, 2.0f);
  std::vector<fastrestart::PublishTensor> ts{{"w", "F32", {1024}, data.data()}};
  auto pub = fastrestart::publish(*key, ts, strict(d / "run"));
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  EXPECT_EQ(pub->fingerprint, key->fingerprint());
  auto r = fastrestart::attach(*key, strict(d / "run"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->hit);
}

}  // namespace
}  // namespace fr
