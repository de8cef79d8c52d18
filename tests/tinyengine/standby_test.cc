// The tiny engine as a standby (docs/tinyengine.md, "As a standby"): the real binary on the host backend,
// started with one end of a socket pair in FASTRESTART_STANDBY_FD; the test plays fastrestartd.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common/fd.h"
#include "engine_process.h"
#include "support/harness.h"

namespace fr::te::test {
namespace {

// fastrestartd's end of the gate socket; the other end is inherited by the next Engine started.
class Gate {
 public:
  Gate() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    m_ours.reset(sv[0]);
    m_theirs.reset(sv[1]);
    ::fcntl(m_theirs.get(), F_SETFD, 0);  // inherited across the engine's exec
    timeval tv{60, 0};                     // a guard against a hang, not a timed assertion
    ::setsockopt(m_ours.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  EngineStart start(const std::string& level, int port = 0) const {
    return {{{"FASTRESTART_STANDBY_FD", std::to_string(m_theirs.get())}, {"FASTRESTART_STANDBY_LEVEL", level}}, port};
  }
  // After the engine was started: only it holds the other end, so closing ours is an end of file there.
  void started() { m_theirs.reset(); }
  nlohmann::json parked() {
    std::string line;
    char c;
    while (::read(m_ours.get(), &c, 1) == 1 && c != '\n') line += c;
    return nlohmann::json::parse(line, nullptr, false);
  }
  void send(const std::string& op) {
    const std::string line = "{\"op\":\"" + op + "\"}\n";
    ASSERT_EQ(::send(m_ours.get(), line.data(), line.size(), MSG_NOSIGNAL), static_cast<ssize_t>(line.size()));
  }
  bool nothing_written() {
    char c;
    return ::recv(m_ours.get(), &c, 1, MSG_DONTWAIT) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  void close() { m_ours.reset(); }

 private:
  fr::UniqueFd m_ours, m_theirs;
};

bool port_open(int port) {
  fr::UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return ::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

bool has(const std::string& log, const std::string& what) { return log.find(what) != std::string::npos; }

const Answer& normal_answer() {
  static const Answer a = [] {
    Engine e(tiny_checkpoint(), {});
    EXPECT_TRUE(e.wait_ready(30)) << e.log();
    auto [code, body] = e.post("/v1/completions", completion_request("the standby", 6));
    EXPECT_EQ(code, 200) << body.dump();
    return answer_of(body);
  }();
  return a;
}

void expect_serves_the_normal_answer(Engine& e) {
  ASSERT_TRUE(e.wait_ready(30)) << e.log();
  auto [code, body] = e.post("/v1/completions", completion_request("the standby", 6));
  ASSERT_EQ(code, 200) << body.dump();
  EXPECT_EQ(answer_of(body), normal_answer());
}

void expect_parked(Gate& g, const Engine& e, const std::string& level) {
  const auto m = g.parked();
  EXPECT_EQ(m, nlohmann::json({{"op", "parked"}, {"v", 1}, {"level", level}, {"pid", e.pid()}})) << e.log();
}

TEST(TinyEngineStandby, ParksAtPreGpuBeforeLoadingWithoutItsPortThenServes) {
  (void)normal_answer();
  const int port = fr::test::free_port();
  Gate g;
  Engine e(tiny_checkpoint(), {}, g.start("pre_gpu", port));
  g.started();
  expect_parked(g, e, "pre_gpu");
  EXPECT_TRUE(has(e.log(), "standby: parked at pre_gpu"));
  EXPECT_FALSE(has(e.log(), "load path=")) << e.log();  // no weight read yet
  EXPECT_FALSE(port_open(port));
  g.send("release");
  expect_serves_the_normal_answer(e);
  EXPECT_EQ(e.port(), port);
  EXPECT_TRUE(has(e.log(), "standby: released at pre_gpu"));
  EXPECT_TRUE(has(e.log(), "load path=disk"));
}

TEST(TinyEngineStandby, ParksAtWarmedAfterLoadAndWarmUpWithoutItsPortThenServes) {
  (void)normal_answer();
  const int port = fr::test::free_port();
  Gate g;
  Engine e(tiny_checkpoint(), {}, g.start("warmed", port));
  g.started();
  expect_parked(g, e, "warmed");
  const std::string log = e.log();
  EXPECT_TRUE(has(log, "load path=disk")) << log;
  EXPECT_TRUE(has(log, " warmup=")) << log;
  EXPECT_TRUE(has(log, "standby: parked at warmed")) << log;
  EXPECT_FALSE(has(log, "listening on")) << log;
  EXPECT_FALSE(port_open(port));
  g.send("release");
  expect_serves_the_normal_answer(e);
  EXPECT_TRUE(has(e.log(), "standby: released at warmed"));
}

TEST(TinyEngineStandby, EndOfFileAndExitExitZero) {
  for (const bool eof : {true, false}) {
    Gate g;
    Engine e(tiny_checkpoint(), {}, g.start("warmed"));
    g.started();
    expect_parked(g, e, "warmed");
    if (eof) g.close();
    else g.send("exit");
    EXPECT_EQ(e.wait_exit(30), 0) << e.log();
    EXPECT_FALSE(has(e.log(), "listening on")) << e.log();
  }
}

TEST(TinyEngineStandby, SigtermWhileParkedExitsZero) {
  for (const char* level : {"pre_gpu", "warmed"}) {
    Gate g;
    Engine e(tiny_checkpoint(), {}, g.start(level));
    g.started();
    expect_parked(g, e, level);
    e.signal(SIGTERM);
    EXPECT_EQ(e.wait_exit(30), 0) << e.log();
    EXPECT_TRUE(has(e.log(), "while parked at the standby gate: exiting")) << e.log();
  }
}

TEST(TinyEngineStandby, AnUnusableVariableExitsOneNamingIt) {
  Gate g;
  auto start = g.start("warmed");
  start.env["FASTRESTART_STANDBY_FD"] = "seven";
  Engine e(tiny_checkpoint(), {}, start);
  EXPECT_EQ(e.wait_exit(30), 1) << e.log();
  EXPECT_TRUE(has(e.log(), "standby gate: FASTRESTART_STANDBY_FD=seven: not a file descriptor number")) << e.log();
}

// The standby faults act only in a process started as a standby: the live engine with the same flags
// starts and serves as usual.
TEST(TinyEngineStandby, FaultsDoNothingInTheLiveEngine) {
  for (const char* mode : {"never-park", "bind-early", "exit-after-release", "die-parked-after=0"}) {
    Engine e(tiny_checkpoint(), {"--fault-standby", mode});
    expect_serves_the_normal_answer(e);
    EXPECT_FALSE(has(e.log(), "standby")) << mode << e.log();
    EXPECT_FALSE(e.wait_exit(0)) << mode;
  }
}

TEST(TinyEngineStandby, FaultNeverParkBindsAndLoadsAsANormalEngine) {
  Gate g;
  Engine e(tiny_checkpoint(), {"--fault-standby", "never-park"}, g.start("pre_gpu"));
  g.started();
  expect_serves_the_normal_answer(e);
  EXPECT_TRUE(g.nothing_written());
  EXPECT_TRUE(has(e.log(), "fault: standby that never parks"));
}

TEST(TinyEngineStandby, FaultBindEarlyListensBeforeParking) {
  const int port = fr::test::free_port();
  Gate g;
  Engine e(tiny_checkpoint(), {"--fault-standby", "bind-early"}, g.start("warmed", port));
  g.started();
  expect_parked(g, e, "warmed");
  EXPECT_TRUE(port_open(port)) << e.log();
  g.send("release");
  expect_serves_the_normal_answer(e);
}

TEST(TinyEngineStandby, FaultBindEarlyOnATakenPortStillParksAndBindsAfterItsRelease) {
  const int port = fr::test::free_port();
  // The live engine's listener, as EngineServer opens it (SO_REUSEADDR, no SO_REUSEPORT).
  fr::UniqueFd live(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int yes = 1;
  ::setsockopt(live.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(live.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(live.get(), 4), 0);

  Gate g;
  Engine e(tiny_checkpoint(), {"--fault-standby", "bind-early"}, g.start("pre_gpu", port));
  g.started();
  expect_parked(g, e, "pre_gpu");
  EXPECT_TRUE(has(e.log(), "fault: bind-early: cannot listen on 127.0.0.1:" + std::to_string(port) +
                               "; waiting at the gate without the port"))
      << e.log();
  live.reset();  // the live engine is gone
  g.send("release");
  expect_serves_the_normal_answer(e);
  EXPECT_EQ(e.port(), port);
}

TEST(TinyEngineStandby, FaultExitAfterReleaseExitsOne) {
  Gate g;
  Engine e(tiny_checkpoint(), {"--fault-standby", "exit-after-release"}, g.start("pre_gpu"));
  g.started();
  expect_parked(g, e, "pre_gpu");
  g.send("release");
  EXPECT_EQ(e.wait_exit(30), 1) << e.log();
  EXPECT_TRUE(has(e.log(), "standby: released at pre_gpu"));
  EXPECT_FALSE(has(e.log(), "load path=")) << e.log();
}

TEST(TinyEngineStandby, FaultDieParkedAfterExitsOneWhileParked) {
  Gate g;
  Engine e(tiny_checkpoint(), {"--fault-standby", "die-parked-after=0.2"}, g.start("warmed"));
  g.started();
  expect_parked(g, e, "warmed");
  EXPECT_EQ(e.wait_exit(30), 1) << e.log();
  EXPECT_TRUE(has(e.log(), "fault: standby dying 0.2 s after parking")) << e.log();
}

TEST(TinyEngineStandby, ABadFaultModeIsAUsageError) {
  auto r = fr::test::run({tinyengine_bin(), "serve", tiny_checkpoint(), "--fault-standby", "die-parked-after=x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, "--fault-standby die-parked-after=x: expected never-park, bind-early, "
                            "exit-after-release or die-parked-after=S"))
      << r.output;
}

}  // namespace
}  // namespace fr::te::test
