// engine.listen = "supervisor" end to end (docs/listen-socket.md): the real fastrestartd owns the engine's
// listening socket and hands it to the tiny engine (fd 3, LISTEN_FDS). Connections made while the engine
// is dead or loading are not refused and get no 503: they wait in the kernel's queue and are answered by
// the next engine. The socket is fastrestartd's from its startup to its exit.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <future>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "support/fastrestartd_config.h"
#include "support/harness.h"
#include "support/supervised.h"

namespace fr {
namespace {

using nlohmann::json;

struct Options {
  std::string start = "[\"warm\", \"cold\"]";
  std::string standby_level;          // non-empty: restart.start leads with "standby" at this level
  std::string engine_flags;           // appended to the engine's flags
  std::vector<std::string> command;   // replaces the tiny engine's command
  int crash_loop_limit = 50;
  double check_timeout_s = 0.5;       // readiness.check_timeout_s
  std::string endpoint;               // readiness.endpoint; empty: the default
  std::map<std::string, std::string> env;  // engine.env
};

// connect(2) to 127.0.0.1:port: 0 when it connected (the socket is returned in *out), else the errno.
int connect_to(uint16_t port, UniqueFd* out = nullptr) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return errno;
  if (out) *out = std::move(fd);
  return 0;
}

class ListenSocketTest : public ::testing::Test {
 protected:
  void write_config(const Options& o) {
    ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", m_dir / "model", "--size", "4M"}).exit_code, 0);
    if (!m_port) m_port = test::free_port();
    m_http = test::free_port();
    const std::string run = m_dir / "run";
    test::FastrestartdConfig c(m_dir.path());
    if (o.command.empty()) {
      c.tiny_engine({.binary = FR_TINYENGINE_BIN, .model = m_dir / "model", .port = m_port,
                     .flags = {"--load-format", "fastrestart", "--fastrestart-socket-dir", run, "--shutdown-grace", "2"},
                     .more_flags = o.engine_flags});
    } else {
      c.text("model", "name", "t").words("engine", "command", o.command).number("engine", "port", m_port);
    }
    c.number("engine", "port", m_port).number("engine", "stop_grace_s", 3).text("engine", "listen", "supervisor")
        .number("engine", "listen_backlog", 64)
        .host_weights(m_dir / "model", run)
        .text("readiness", "model", "t").number("readiness", "poll_interval_s", 0.05).number("readiness", "check_interval_s", 0.3)
        .number("readiness", "check_timeout_s", o.check_timeout_s)
        .number("restart", "backoff_initial_s", 0.05).number("restart", "backoff_max_s", 0.2)
        .number("restart", "crash_loop_limit", o.crash_loop_limit).number("restart", "warm_failures_before_cold", 0)
        .set("restart", "start", o.standby_level.empty() ? o.start : "[\"standby\", \"warm\", \"cold\"]")
        .http(m_http);
    if (!o.endpoint.empty()) c.text("readiness", "endpoint", o.endpoint);
    for (const auto& [k, v] : o.env) c.text("engine.env", k, v);
    if (!o.standby_level.empty()) c.text("standby", "level", o.standby_level);
    m_cfg = c.write();
    m_config = std::make_unique<test::FastrestartdConfig>(c);
  }
  void launch(const Options& o = {}) {
    write_config(o);
    m_sup = test::start_fastrestartd(FR_FASTRESTARTD_BIN, *m_config);
  }
  json ready(pid_t not_pid = 0) { return m_sup->expect_ready(not_pid); }
  // launch() with readiness.endpoint = "private"; the status at READY.
  json launch_private(Options o) {
    o.endpoint = "private";
    launch(o);
    return ready();
  }
  json parked(pid_t not_pid = 0) { return m_sup->expect_parked(not_pid); }
  // A completion with a client timeout far above any restart here: what a patient client gets.
  test::HttpAnswer complete(double timeout_s = 60) {
    return test::http_post(m_port, "/v1/completions", {{"model", "t"}, {"prompt", "The capital of France is"}, {"max_tokens", 1}},
                           timeout_s);
  }
  // The engine's readiness endpoint in `st`, which must be a private one (on loopback); returned.
  static std::string private_endpoint(const json& st) {
    const std::string e = st["engine"].value("readiness_endpoint", "");
    EXPECT_EQ(e.rfind("private 127.0.0.1:", 0), 0u) << st.dump();
    return e;
  }
  static std::string text_of(const test::HttpAnswer& a) {
    auto j = json::parse(a.body, nullptr, false);
    return j.is_object() && j.contains("choices") ? j["choices"][0].value("text", "") : "";
  }
  // Kills the engine with SIGKILL and, at once, connects and sends `n` completions from as many clients:
  // none is refused, every one is answered 200 with `expected` by the engine that comes up next.
  void kill_and_send(pid_t engine, int n, const std::string& expected) {
    ASSERT_EQ(::kill(engine, SIGKILL), 0);
    UniqueFd early;
    EXPECT_EQ(connect_to(m_port, &early), 0) << "a connection right after the kill was refused";
    std::vector<std::future<test::HttpAnswer>> clients;
    for (int i = 0; i < n; ++i) clients.push_back(std::async(std::launch::async, [this] { return complete(); }));
    for (auto& c : clients) {
      const auto a = c.get();
      EXPECT_EQ(a.status, 200) << "a request sent during the restart failed (0: refused or no answer): " << a.body << "\n"
                               << m_sup->log();
      EXPECT_EQ(text_of(a), expected);
    }
  }

  test::TempDir m_dir;
  uint16_t m_port = 0, m_http = 0;
  std::string m_cfg;
  std::unique_ptr<test::FastrestartdConfig> m_config;
  std::unique_ptr<test::Supervised> m_sup;
};

// A warm restart that takes a while (the startup-delay fault): requests sent right after the kill, while
// no engine runs and then while the next one loads, are answered by it; none is refused or gets a 503.
TEST_F(ListenSocketTest, RequestsDuringAWarmRestartWaitAndSucceed) {
  Options o;
  o.engine_flags = ", \"--fault-startup-delay\", \"1\"";
  launch(o);
  json st = ready();
  const std::string expected = text_of(complete());
  ASSERT_FALSE(expected.empty());
  for (int round = 0; round < 2; ++round) {
    const pid_t engine = st["engine"]["pid"];
    kill_and_send(engine, 4, expected);
    st = ready(engine);
    EXPECT_EQ(st["last_exit"]["cause"], "crash") << st.dump();
  }
  // While no engine runs at all (stopped on request), the port still takes connections.
  ASSERT_EQ(test::run({FR_FASTRESTARTCTL_BIN, "--socket", m_dir / "ctl/t.ctl", "stop-engine"}).exit_code, 0) << m_sup->log();
  ASSERT_TRUE(m_sup->wait_for([](const json& j) { return j.value("state", "") == "held"; }, 30))
      << m_sup->log();
  EXPECT_EQ(connect_to(m_port), 0) << "the port refused a connection while the engine was stopped";
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
  // Closed at fastrestartd's exit, and only then.
  EXPECT_EQ(connect_to(m_port), ECONNREFUSED);
}

// A completion sent on a raw connection that then waits, unread, in the port's accept queue; answered()
// reads the whole answer (Connection: close) and returns its HTTP status (0: none).
struct QueuedRequest {
  UniqueFd fd;
  static QueuedRequest send(uint16_t port, int max_tokens) {
    QueuedRequest q;
    if (connect_to(port, &q.fd) != 0) return q;
    const std::string body = json{{"model", "t"}, {"prompt", "The capital of France is"}, {"max_tokens", max_tokens}}.dump();
    const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nConnection: close\r\n"
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    if (::send(q.fd.get(), req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) q.fd.reset();
    return q;
  }
  int answered() {
    std::string got;
    char buf[4096];
    ssize_t n;
    while (fd && (n = ::recv(fd.get(), buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
    return got.rfind("HTTP/1.1 ", 0) == 0 && got.size() >= 12 ? std::atoi(got.substr(9, 3).c_str()) : 0;
  }
};

// readiness.endpoint = "private" (docs/listen-socket.md, "The private endpoint"): with clients' slow
// requests queued on the public socket when the engine starts, fastrestartd's readiness check goes
// through the engine's private endpoint and READY comes before the queue is worked off, not after it.
// The engine answers two requests at a time, each taking 5 token delays: the queue takes 16 rounds; the
// old check, queued behind it, saw READY only once every client was answered.
TEST_F(ListenSocketTest, ReadyIsNotBehindClientsQueuedOnThePublicSocket) {
  Options o;
  o.engine_flags = ", \"--threads\", \"2\", \"--fault-token-delay\", \"0.02\"";
  json st = launch_private(o);
  private_endpoint(st);
  const std::string ctl = m_dir / "ctl/t.ctl";
  ASSERT_EQ(test::run({FR_FASTRESTARTCTL_BIN, "--socket", ctl, "stop-engine"}).exit_code, 0) << m_sup->log();
  ASSERT_TRUE(m_sup->wait_for([](const json& j) { return j.value("state", "") == "held"; }, 30)) << m_sup->log();
  // Queued while no engine runs: they are ahead of any check of the next engine.
  constexpr int kClients = 32;
  std::vector<QueuedRequest> queued;
  for (int i = 0; i < kClients; ++i) queued.push_back(QueuedRequest::send(m_port, 5));
  std::atomic<int> answered{0}, ok{0};
  std::vector<std::thread> readers;
  for (auto& q : queued)
    readers.emplace_back([&q, &answered, &ok] {
      const int status = q.answered();
      ++answered;
      if (status == 200) ++ok;
    });
  ASSERT_EQ(test::run({FR_FASTRESTARTCTL_BIN, "--socket", ctl, "start-engine"}).exit_code, 0) << m_sup->log();
  int answered_at_ready = -1;
  for (int i = 0; i < 3000 && answered_at_ready < 0; ++i) {
    const json s = m_sup->status();
    if (s.value("state", "") == "ready") answered_at_ready = answered.load();
    else std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& r : readers) r.join();
  EXPECT_EQ(ok.load(), kClients) << "a queued request failed: " << m_sup->log();
  ASSERT_GE(answered_at_ready, 0) << "never ready: " << m_sup->log();
  EXPECT_LT(answered_at_ready, kClients / 2) << "READY came after " << answered_at_ready << " of the " << kClients
                                             << " queued requests were answered: " << m_sup->log();
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

class ListenSocketStandby : public ListenSocketTest, public ::testing::WithParamInterface<const char*> {};

// A parked standby holds the socket without accepting (and is not taken for a standby that binds the port
// before its release); released, it answers the requests that arrived while the engine was dead.
TEST_P(ListenSocketStandby, TheReleasedStandbyAnswersWhatArrivedDuringTheRestart) {
  Options o;
  o.standby_level = GetParam();
  launch(o);
  ready();
  const std::string expected = text_of(complete());
  ASSERT_FALSE(expected.empty());
  for (int round = 0; round < 2; ++round) {
    json st = parked();
    const pid_t engine = st["engine"]["pid"], standby = st["standby"]["pid"];
    kill_and_send(engine, 4, expected);
    st = ready(engine);
    EXPECT_EQ(st["engine"]["pid"], standby) << st.dump();
    EXPECT_EQ(st["last_start"]["path"], "standby") << st.dump();
  }
  const json st = parked();
  EXPECT_EQ(st["standby"]["releases"], 2) << st.dump();
  EXPECT_EQ(st["standby"]["failures"].value("listening", 0), 0) << "the handed-down socket was taken for the standby's own: " << st.dump();
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
  EXPECT_EQ(connect_to(m_port), ECONNREFUSED);
}

INSTANTIATE_TEST_SUITE_P(Levels, ListenSocketStandby, ::testing::Values("pre_gpu", "warmed"));

// A standby gets a private endpoint of its own while parked; released, its readiness goes there (not to the
// dead engine's, which refuses at once) and it answers what arrived during the restart.
TEST_F(ListenSocketTest, AReleasedStandbyIsCheckedOnItsOwnPrivateEndpoint) {
  Options o;
  o.standby_level = "warmed";
  json st = launch_private(o);
  const std::string expected = text_of(complete());
  ASSERT_FALSE(expected.empty());
  const std::string before = private_endpoint(st);
  st = parked();
  const pid_t engine = st["engine"]["pid"], standby = st["standby"]["pid"];
  kill_and_send(engine, 4, expected);
  st = ready(engine);
  EXPECT_EQ(st["engine"]["pid"], standby) << st.dump();
  EXPECT_EQ(st["last_start"]["path"], "standby") << st.dump();
  const std::string after = private_endpoint(st);
  EXPECT_NE(after, before) << "the released standby is checked on the dead engine's endpoint";
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// A health check of the live engine that is still waiting when the engine dies: its connection sits in the
// queue of fastrestartd's socket and is answered by the released standby, after the standby's first
// readiness poll found a probe in flight. That stale probe must not stop readiness polling: the standby is
// ready through the standby path, not after the start deadline on another path. (Most often seen with
// pre_gpu: its release loads the model before it accepts, so its first polls all find the probe waiting.)
TEST_P(ListenSocketStandby, AHealthCheckInFlightAtTheDeathDoesNotStallTheRelease) {
  Options o;
  o.standby_level = GetParam();
  o.check_timeout_s = 5;  // the stopped engine's health check waits this long
  launch(o);
  ready();
  const json st = parked();
  const pid_t engine = st["engine"]["pid"], standby = st["standby"]["pid"];
  // Stopped, the engine accepts nothing: the next health check (every 0.3 s) waits in the socket's queue.
  ASSERT_EQ(::kill(engine, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  ASSERT_EQ(::kill(engine, SIGKILL), 0);
  json after;
  ASSERT_TRUE(m_sup->wait_ready(&after, engine, 20)) << "readiness stalled behind the dead engine's health check: "
                                                     << m_sup->log();
  EXPECT_EQ(after["engine"]["pid"], standby) << after.dump();
  EXPECT_EQ(after["last_start"]["path"], "standby") << after.dump();
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// Replaces `from` (which must be there) with `to` in the file at `path`.
void edit_file(const std::string& path, const std::string& from, const std::string& to) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const auto pos = text.find(from);
  ASSERT_NE(pos, std::string::npos) << "no " << from << " in " << text;
  text.replace(pos, from.size(), to);
  std::ofstream(path) << text;
}

struct AddressEdit {
  const char* field;
  std::string from, to;  // in the config file; "{port}": the engine's port
};

class ListenSocketReload : public ListenSocketTest, public ::testing::WithParamInterface<AddressEdit> {};

// A re-read config (fastrestartctl reload without flags, then SIGHUP) that moves where the engine serves
// is refused, naming the field and that it takes a restart of fastrestartd: the socket fastrestartd holds
// stays the engine's, the probes keep going to it (a restart later is ready on it), and fastrestartd never
// exits over it.
TEST_P(ListenSocketReload, AChangeOfWhereTheEngineServesIsRefusedAndTheEngineKeepsServing) {
  launch();
  const json st = ready();
  const pid_t engine = st["engine"]["pid"];
  const std::string expected = text_of(complete());
  ASSERT_FALSE(expected.empty());
  auto subst = [&](std::string t) {
    if (auto at = t.find("{port}"); at != std::string::npos) t.replace(at, 6, std::to_string(m_port));
    if (auto at = t.find("{other}"); at != std::string::npos) t.replace(at, 7, std::to_string(test::free_port()));
    return t;
  };
  edit_file(m_cfg, subst(GetParam().from), subst(GetParam().to));
  const auto r = test::run({FR_FASTRESTARTCTL_BIN, "--socket", m_dir / "ctl/t.ctl", "reload"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(std::string("keeping the running config: ") + GetParam().field + " "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("changes only with a restart of fastrestartd"), std::string::npos) << r.output;
  ASSERT_EQ(::kill(m_sup->pid(), SIGHUP), 0);
  ASSERT_TRUE(m_sup->wait_for([&](const json&) { return m_sup->log().find("SIGHUP: keeping the running config") != std::string::npos; }, 30))
      << m_sup->log();
  // Nothing restarted; the engine answers on the socket fastrestartd holds.
  json now = m_sup->status();
  EXPECT_EQ(now.value("state", ""), "ready") << now.dump();
  EXPECT_EQ(now["engine"].value("pid", 0), engine) << now.dump();
  EXPECT_EQ(text_of(complete()), expected);
  // The probes still go where the engine serves: a restart is ready again, on the same socket.
  ASSERT_EQ(test::run({FR_FASTRESTARTCTL_BIN, "--socket", m_dir / "ctl/t.ctl", "restart"}).exit_code, 0) << m_sup->log();
  ready(engine);
  EXPECT_EQ(text_of(complete()), expected);
  EXPECT_EQ(::waitpid(m_sup->pid(), nullptr, WNOHANG), 0) << "fastrestartd exited: " << m_sup->log();
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

INSTANTIATE_TEST_SUITE_P(Fields, ListenSocketReload,
                         ::testing::Values(AddressEdit{"engine.port", "\nport = {port}\n", "\nport = {other}\n"},
                                           AddressEdit{"engine.listen", "listen = \"supervisor\"", "listen = \"engine\""},
                                           AddressEdit{"engine.host", "[engine]\n", "[engine]\nhost = \"localhost\"\n"}),
                         [](const ::testing::TestParamInfo<AddressEdit>& p) { return std::string(p.param.field).substr(7); });

// The descriptors every child gets: an engine lists its own (0, 1, 2 and the socket at 3), and no process
// fastrestartd started (the engine, the weight daemon) holds a file fastrestartd itself inherited without
// close-on-exec from whoever started it.
TEST_F(ListenSocketTest, ChildrenHoldNoDescriptorFastrestartdInherited) {
  m_port = test::free_port();
  const std::string marker = m_dir / "inherited-by-fastrestartd";
  std::ofstream(marker) << "x";
  Options o;
  o.command = {"/bin/sh", "-c",
               "printf 'engine-fds: '; ls -m /proc/$$/fd; exec \"$0\" \"$@\"",
               FR_TINYENGINE_BIN, "serve", m_dir / "model", "--port", std::to_string(m_port), "--served-model-name", "t",
               "--load-format", "fastrestart", "--fastrestart-socket-dir", m_dir / "run", "--shutdown-grace", "2"};
  UniqueFd leaked(::open(marker.c_str(), O_RDONLY));  // no O_CLOEXEC: fastrestartd inherits it
  ASSERT_TRUE(leaked);
  launch(o);
  leaked.reset();
  ready();
  const std::string log = m_sup->log();
  EXPECT_NE(log.find("engine-fds: 0, 1, 2, 3\n"), std::string::npos) << log;
  // fastrestartd does hold it (else this test proves nothing); none of its descendants does.
  auto holds = [&](pid_t pid) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec))
      if (std::filesystem::read_symlink(e.path(), ec) == marker) return true;
    return false;
  };
  EXPECT_TRUE(holds(m_sup->pid())) << "the test's descriptor did not reach fastrestartd";
  std::vector<pid_t> descendants;
  std::map<pid_t, pid_t> parent;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(f)), {});
    const auto close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    parent[std::stoi(name)] = ppid;
  }
  for (const auto& [pid, ppid] : parent) {
    for (pid_t p = ppid; p > 1; p = parent.count(p) ? parent[p] : 0)
      if (p == m_sup->pid()) {
        descendants.push_back(pid);
        break;
      }
  }
  EXPECT_GE(descendants.size(), 2u) << "the engine and the weight daemon";
  for (pid_t pid : descendants) EXPECT_FALSE(holds(pid)) << "pid " << pid << " holds " << marker;
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// The engine is told the accept queue's configured length (engine.listen_backlog, 64 here) beside the
// socket, which a server calling listen() again would otherwise change for good; engine.env's own value wins.
TEST_F(ListenSocketTest, TheEngineIsToldTheConfiguredBacklogUnlessEngineEnvSetsIt) {
  for (const std::string own : {"", "100"}) {
    SCOPED_TRACE("engine.env FASTRESTART_LISTEN_BACKLOG = \"" + own + "\"");
    m_port = test::free_port();
    Options o;
    if (!own.empty()) o.env["FASTRESTART_LISTEN_BACKLOG"] = own;
    o.command = {"/bin/sh", "-c", "printf 'engine-backlog: %s.\\n' \"$FASTRESTART_LISTEN_BACKLOG\"; exec \"$0\" \"$@\"",
                 FR_TINYENGINE_BIN, "serve", m_dir / "model", "--port", std::to_string(m_port), "--served-model-name", "t",
                 "--load-format", "fastrestart", "--fastrestart-socket-dir", m_dir / "run", "--shutdown-grace", "2"};
    launch(o);
    ready();
    const std::string log = m_sup->log();
    EXPECT_NE(log.find("engine-backlog: " + (own.empty() ? std::string("64") : own) + ".\n"), std::string::npos) << log;
    EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
  }
}

// An engine that ignores LISTEN_FDS and binds the port itself: its "Address already in use" is named as
// what it is, in status and in one log line naming the option.
TEST_F(ListenSocketTest, AnEngineThatBindsThePortItselfIsNamed) {
  m_port = test::free_port();
  Options o;
  o.command = {"/usr/bin/python3", "-c",
               "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', " + std::to_string(m_port) + "))\ns.listen()\n"};
  o.crash_loop_limit = 10000;  // still restarting it when the test stops fastrestartd
  launch(o);
  json st;
  ASSERT_TRUE(m_sup->wait_for([](const json& j) { return j["last_exit"].is_object() && j["last_exit"].contains("detail"); }, 60, &st))
      << m_sup->log();
  const std::string detail = st["last_exit"].value("detail", "");
  EXPECT_NE(detail.find("engine.listen = \"supervisor\" is set but the engine binds port " + std::to_string(m_port) + " itself"),
            std::string::npos) << detail;
  EXPECT_NE(detail.find("Address already in use"), std::string::npos) << detail;
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
  EXPECT_NE(m_sup->log().find("is set but the engine binds port"), std::string::npos) << m_sup->log();
}

// The port is taken when fastrestartd starts: it says where and which fields, and exits 4 before starting
// anything (no READY).
TEST_F(ListenSocketTest, AnAddressInUseAtStartupIsAClearError) {
  UniqueFd taken(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(taken.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(taken.get(), 1), 0);
  ASSERT_EQ(::getsockname(taken.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  m_port = ntohs(a.sin_port);
  write_config({});
  const auto r = test::run({FR_FASTRESTARTD_BIN, "--config", m_cfg});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("cannot listen on 127.0.0.1:" + std::to_string(m_port) + " (engine.host, engine.port; engine.listen = \"supervisor\")"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Address already in use"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(std::string("engine: ") + FR_TINYENGINE_BIN), std::string::npos) << "an engine was started: " << r.output;
}

}  // namespace
}  // namespace fr
