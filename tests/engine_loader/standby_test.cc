// The standby gate (fastrestart/standby.h) against a real socket pair: a forked child parks at its gate and
// this test plays fastrestartd on the other end.
#include "fastrestart/standby.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "common/fd.h"
#include "protocol/messages.h"

namespace {

using fr::proto::json;
using fastrestart::GateResult;

// Sets (or, with nullopt, unsets) a variable for one test and puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : m_name(name) {
    if (const char* old = std::getenv(name)) m_old = old;
    if (value) ::setenv(name, value->c_str(), 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (m_old) ::setenv(m_name, m_old->c_str(), 1);
    else ::unsetenv(m_name);
  }

 private:
  const char* m_name;
  std::optional<std::string> m_old;
};

// A child process waiting at standby_gate(gate_level) with FASTRESTART_STANDBY_LEVEL=env_level. It reports
// what the gate returned on a pipe ("passed", "released env=<gone|set> fd=<closed|open>", "error <msg>").
struct GateChild {
  pid_t pid = -1;
  fr::UniqueFd supervisor;  // our end of the socket pair
  fr::UniqueFd report;      // read end of the child's report pipe

  GateChild(const std::string& env_level, const std::string& gate_level) {
    int sv[2], pp[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    EXPECT_EQ(::pipe2(pp, O_CLOEXEC), 0);
    pid = ::fork();
    if (pid == 0) {
      ::close(sv[0]);
      ::close(pp[0]);
      ::setenv(fastrestart::kStandbyFdEnv, std::to_string(sv[1]).c_str(), 1);
      ::setenv(fastrestart::kStandbyLevelEnv, env_level.c_str(), 1);
      auto r = fastrestart::standby_gate(gate_level);
      std::string out;
      if (!r.ok()) out = "error " + r.error().message;
      else if (*r == GateResult::kPassed) out = "passed";
      else
        out = std::string("released env=") +
              (std::getenv(fastrestart::kStandbyFdEnv) || std::getenv(fastrestart::kStandbyLevelEnv) ? "set" : "gone") +
              " fd=" + (::fcntl(sv[1], F_GETFD) < 0 ? "closed" : "open") +
              " is_standby=" + (fastrestart::is_standby() ? "1" : "0");
      (void)!::write(pp[1], out.data(), out.size());
      ::_exit(7);
    }
    ::close(sv[1]);
    ::close(pp[1]);
    supervisor.reset(sv[0]);
    report.reset(pp[0]);
    // A guard against a hang, not a timed assertion: a gate that never writes fails the test.
    timeval tv{30, 0};
    ::setsockopt(supervisor.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }

  std::string read_line() {
    std::string line;
    char c;
    while (::read(supervisor.get(), &c, 1) == 1 && c != '\n') line += c;
    return line;
  }
  void send(const std::string& s) { ASSERT_EQ(::send(supervisor.get(), s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size())); }
  // Waits for the child; returns its exit code (or 128 + signal) and what it reported.
  std::pair<int, std::string> wait() {
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    std::string out;
    char buf[512];
    for (ssize_t n; (n = ::read(report.get(), buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
    return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
  }
};

void expect_parked(GateChild& c, const std::string& level) {
  const json m = json::parse(c.read_line(), nullptr, false);
  ASSERT_TRUE(m.is_object()) << m.dump();
  EXPECT_EQ(m.value("op", ""), "parked");
  EXPECT_EQ(m.value("v", 0), 1);
  EXPECT_EQ(m.value("level", ""), level);
  EXPECT_EQ(m.value("pid", 0), c.pid);
}

TEST(Standby, ParksAndReleaseReturnsWithTheEnvironmentAndFdGone) {
  GateChild c("warmed", "warmed");
  expect_parked(c, "warmed");
  c.send("{\"op\":\"release\",\"extra\":1}\n");
  auto [code, out] = c.wait();
  EXPECT_EQ(code, 7);
  EXPECT_EQ(out, "released env=gone fd=closed is_standby=0");
}

TEST(Standby, ParksAtPreGpu) {
  GateChild c("pre_gpu", "pre_gpu");
  expect_parked(c, "pre_gpu");
  c.send("{\"op\":\"release\"}\n");
  EXPECT_EQ(c.wait().second, "released env=gone fd=closed is_standby=0");
}

TEST(Standby, ExitMessageExitsZeroWithoutReturning) {
  GateChild c("pre_gpu", "pre_gpu");
  expect_parked(c, "pre_gpu");
  c.send("{\"op\":\"exit\"}\n");
  EXPECT_EQ(c.wait(), std::make_pair(0, std::string()));
}

TEST(Standby, EndOfFileExitsZeroWithoutReturning) {
  GateChild c("warmed", "warmed");
  expect_parked(c, "warmed");
  c.supervisor.reset();
  EXPECT_EQ(c.wait(), std::make_pair(0, std::string()));
}

TEST(Standby, SupervisorGoneBeforeTheParkExitsZero) {
  GateChild c("warmed", "warmed");
  c.supervisor.reset();  // the child may find it closed at its write or at its read: both exit 0
  EXPECT_EQ(c.wait(), std::make_pair(0, std::string()));
}

TEST(Standby, AGateOfAnotherLevelPasses) {
  GateChild c("warmed", "pre_gpu");
  auto [code, out] = c.wait();
  EXPECT_EQ(out, "passed");
  EXPECT_EQ(code, 7);
}

TEST(Standby, WithoutTheVariableEveryGatePasses) {
  ScopedEnv fd(fastrestart::kStandbyFdEnv, std::nullopt);
  ScopedEnv level(fastrestart::kStandbyLevelEnv, "pre_gpu");
  EXPECT_FALSE(fastrestart::is_standby());
  for (const char* l : {"pre_gpu", "warmed"}) {
    auto r = fastrestart::standby_gate(l);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(*r, GateResult::kPassed);
  }
}

TEST(Standby, AnUnknownGateLevelIsAnInvalidArgument) {
  auto r = fastrestart::standby_gate("hot");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, fastrestart::Errc::kInvalidArgument);
  EXPECT_NE(r.error().message.find("\"hot\""), std::string::npos) << r.error().message;
}

TEST(Standby, MalformedRepliesAreErrorsNamingTheMessage) {
  for (const std::string reply : {"not json", "[1,2]", "{\"op\":\"dance\"}", "{\"release\":true}"}) {
    GateChild c("pre_gpu", "pre_gpu");
    expect_parked(c, "pre_gpu");
    c.send(reply + "\n");
    auto [code, out] = c.wait();
    EXPECT_EQ(code, 7) << reply;
    EXPECT_EQ(out.rfind("error standby gate: ", 0), 0u) << out;
    EXPECT_NE(out.find(reply), std::string::npos) << out;
  }
}

TEST(Standby, AnOversizedReplyIsAnError) {
  GateChild c("pre_gpu", "pre_gpu");
  expect_parked(c, "pre_gpu");
  c.send(std::string(5000, 'x'));
  auto [code, out] = c.wait();
  EXPECT_NE(out.find("over 4096 bytes"), std::string::npos) << out;
}

TEST(Standby, BadVariablesAreErrorsNamingThem) {
  ScopedEnv level(fastrestart::kStandbyLevelEnv, "pre_gpu");
  const auto error_for = [](const std::string& fd) {
    ScopedEnv v(fastrestart::kStandbyFdEnv, fd);
    auto r = fastrestart::standby_gate("pre_gpu");
    return r.ok() ? std::string("ok") : r.error().message;
  };
  EXPECT_EQ(error_for("abc"), "FASTRESTART_STANDBY_FD=abc: not a file descriptor number");
  EXPECT_EQ(error_for("-3"), "FASTRESTART_STANDBY_FD=-3: not a file descriptor number");
  EXPECT_EQ(error_for("12x"), "FASTRESTART_STANDBY_FD=12x: not a file descriptor number");
  EXPECT_EQ(error_for("999999").rfind("FASTRESTART_STANDBY_FD=999999: not an open file descriptor", 0), 0u);
  fr::UniqueFd file(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const std::string n = std::to_string(file.get());
  EXPECT_EQ(error_for(n), "FASTRESTART_STANDBY_FD=" + n + ": not a stream socket");

  ScopedEnv fd(fastrestart::kStandbyFdEnv, n);
  ScopedEnv bad_level(fastrestart::kStandbyLevelEnv, "hot");
  auto r = fastrestart::standby_gate("warmed");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "FASTRESTART_STANDBY_LEVEL=hot: expected pre_gpu or warmed");
}

}  // namespace
