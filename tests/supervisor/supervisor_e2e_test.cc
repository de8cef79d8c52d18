// fastrestartd end to end: the real supervisor, the real tiny engine, a real weight daemon (host backend),
// real signals, and sd_notify read from a datagram socket this test owns.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/fastrestartd_config.h"
#include "support/harness.h"

namespace fr {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

// Collects sd_notify datagrams.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : m_path(path) {
    m_fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    EXPECT_EQ(::bind(m_fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    timeval tv{0, 100000};
    ::setsockopt(m_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    m_thread = std::thread([this] {
      char buf[4096];
      while (!m_stop) {
        ssize_t n = ::recv(m_fd, buf, sizeof buf, 0);
        if (n <= 0) continue;
        std::lock_guard lk(m_mu);
        m_msgs.emplace_back(buf, static_cast<size_t>(n));
      }
    });
  }
  ~NotifySocket() {
    m_stop = true;
    m_thread.join();
    ::close(m_fd);
  }
  std::vector<std::string> messages() {
    std::lock_guard lk(m_mu);
    return m_msgs;
  }
  // Waits until `count` messages contain `needle`; returns false on timeout.
  bool wait_for(const std::string& needle, int count = 1, double timeout_s = 60) {
    auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (Clock::now() < end) {
      int n = 0;
      for (const auto& m : messages()) n += m.find(needle) != std::string::npos;
      if (n >= count) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

 private:
  std::string m_path;
  int m_fd = -1;
  std::atomic<bool> m_stop{false};
  std::thread m_thread;
  std::mutex m_mu;
  std::vector<std::string> m_msgs;
};

// A tiny-engine checkpoint shared by every test of this binary.
const std::string& checkpoint_dir() {
  static test::TempDir* dir = new test::TempDir;
  static std::string path = [] {
    std::string d = *dir / "model";
    auto r = test::run({FR_TINYENGINE_BIN, "gen", "--out", d, "--size", "16M"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return d;
  }();
  return path;
}

struct Options {
  std::string engine_flags;  // TOML array body, appended to the defaults
  std::string extra;         // more TOML (sections)
  std::string kind = "generic";
  int crash_loop_limit = 20;
  double startup_timeout_s = 60;
  std::string weights_mode = "zero_copy";
  std::string cgroup;
  std::string engine_binary = FR_TINYENGINE_BIN;
  std::string gpus = "[]";
  std::string gpus_and_weights;  // replaces [weights] when set
  std::string fake_nvml;         // FASTRESTART_FAKE_NVML for fastrestartd
  uint16_t http_port = 0;        // 0: [http] listen = "none"
  std::string daemon_read_gate;  // FASTRESTART_TEST_READ_GATE: the daemons' reads wait until this file exists
};

class Fastrestartd {
 public:
  explicit Fastrestartd(const Options& o = {}) : m_port(test::free_port()) {
    m_fake_nvml = o.fake_nvml;
    m_read_gate = o.daemon_read_gate;
    test::FastrestartdConfig c(m_dir.path());
    c.set("", "gpus", o.gpus).text("model", "name", "t").text("engine", "kind", o.kind)
        .tiny_engine({.binary = o.engine_binary, .model = checkpoint_dir(), .port = m_port, .host = "127.0.0.1",
                      .flags = {"--load-format", "fastrestart", "--fastrestart-socket-dir", m_dir / "run", "--shutdown-grace", "2"},
                      .more_flags = o.engine_flags})
        .number("engine", "stop_grace_s", 3)
        .text("readiness", "model", "t").number("readiness", "startup_timeout_s", o.startup_timeout_s)
        .number("readiness", "poll_interval_s", 0.05).number("readiness", "check_interval_s", 0.3)
        .number("readiness", "check_timeout_s", 1).number("readiness", "hang_after_failures", 2)
        .number("restart", "backoff_initial_s", 0.1).number("restart", "backoff_max_s", 0.5)
        .number("restart", "crash_loop_limit", o.crash_loop_limit).number("restart", "crash_loop_window_s", 600)
        .number("restart", "warm_failures_before_cold", 0)
        .append(o.gpus_and_weights + o.extra);
    if (!o.cgroup.empty()) c.text("engine", "cgroup", o.cgroup);
    if (o.gpus_and_weights.empty()) c.text("weights", "mode", o.weights_mode).host_weights(checkpoint_dir(), m_dir / "run");
    if (o.http_port) c.http(o.http_port);
    m_cfg = c.write(m_dir / "model.toml");
    m_notify = std::make_unique<NotifySocket>(m_dir / "notify.sock");
    m_log = m_dir / "fastrestartd.log";
    start();
  }
  ~Fastrestartd() {
    if (m_pid > 0) {
      ::kill(m_pid, SIGTERM);
      int st;
      ::waitpid(m_pid, &st, 0);
    }
  }
  void start() {
    std::map<std::string, std::string> env{{"NOTIFY_SOCKET", m_dir / "notify.sock"}};
    if (!m_fake_nvml.empty()) env["FASTRESTART_FAKE_NVML"] = m_fake_nvml;
    if (!m_read_gate.empty()) env["FASTRESTART_TEST_READ_GATE"] = m_read_gate;
    m_pid = test::spawn_logged({FR_FASTRESTARTD_BIN, "--config", m_cfg, "--log-level", "debug"}, m_log, env);
  }
  // SIGTERM (or `sig`) and wait; returns the exit code.
  int stop(int sig = SIGTERM) {
    ::kill(m_pid, sig);
    return wait_exit();
  }
  int wait_exit() {
    int st = 0;
    ::waitpid(m_pid, &st, 0);
    m_pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  test::RunResult ctl(std::vector<std::string> args) {
    std::vector<std::string> argv{FR_FASTRESTARTCTL_BIN, "--socket", m_dir / "ctl/t.ctl"};
    argv.insert(argv.end(), args.begin(), args.end());
    return test::run(argv);
  }
  json status() {
    auto r = ctl({"status", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto j = json::parse(r.output, nullptr, false);
    return j.is_discarded() ? json::object() : j;
  }
  // Waits until the status satisfies pred.
  bool wait_status(const std::function<bool(const json&)>& pred, double timeout_s = 60) {
    auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (Clock::now() < end) {
      auto r = ctl({"status", "--json"});
      if (r.exit_code == 0) {
        auto j = json::parse(r.output, nullptr, false);
        if (!j.is_discarded() && pred(j)) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  std::string log() const {
    std::ifstream f(m_log);
    return {std::istreambuf_iterator<char>(f), {}};
  }
  json engine_stats() {
    auto r = test::run({"/usr/bin/curl", "-s", "http://127.0.0.1:" + std::to_string(m_port) + "/stats"});
    auto j = json::parse(r.output, nullptr, false);
    return j.is_discarded() ? json::object() : j;
  }
  NotifySocket& notify() { return *m_notify; }
  pid_t pid() const { return m_pid; }
  const test::TempDir& dir() const { return m_dir; }
  std::string config() const { return m_cfg; }

 private:
  test::TempDir m_dir;
  uint16_t m_port;
  std::string m_cfg, m_log, m_fake_nvml;
  std::string m_read_gate;
  std::unique_ptr<NotifySocket> m_notify;
  pid_t m_pid = -1;
};

int restarts(const json& s, const std::string& cause) { return s["restarts"].value(cause, 0); }

TEST(Fastrestartd, ColdStartReachesReadyAndNotifiesInOrder) {
  Fastrestartd d;
  ASSERT_TRUE(d.notify().wait_for("READY=1")) << d.log();
  auto msgs = d.notify().messages();
  auto index_of = [&](const std::string& needle) {
    for (size_t i = 0; i < msgs.size(); ++i)
      if (msgs[i].find(needle) != std::string::npos) return static_cast<int>(i);
    return -1;
  };
  int daemons = index_of("STATUS=Starting the weight daemons"), engine = index_of("STATUS=Starting the engine (cold)"),
      ready = index_of("READY=1");
  ASSERT_GE(daemons, 0);
  EXPECT_LT(daemons, engine);
  EXPECT_LT(engine, ready);
  EXPECT_NE(msgs[static_cast<size_t>(ready)].find("STATUS=Ready (cold) in "), std::string::npos) << msgs[static_cast<size_t>(ready)];
  auto s = d.status();
  EXPECT_EQ(s["state"], "ready");
  EXPECT_EQ(s["last_start"]["path"], "cold");
  EXPECT_EQ(d.stop(), 0);
  EXPECT_TRUE(d.notify().wait_for("STOPPING=1", 1, 5));
}

// A slow engine start keeps systemd's start timeout away with EXTEND_TIMEOUT_USEC until READY=1.
TEST(Fastrestartd, ASlowFirstStartExtendsTheStartTimeout) {
  Options o;
  o.engine_flags = ", \"--fault-startup-delay\", \"1\"";
  Fastrestartd d(o);
  ASSERT_TRUE(d.notify().wait_for("READY=1", 1, 60)) << d.log();
  auto msgs = d.notify().messages();
  int extend = -1, ready = -1;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (extend < 0 && msgs[i].find("EXTEND_TIMEOUT_USEC=30000000") != std::string::npos) extend = static_cast<int>(i);
    if (msgs[i].find("READY=1") != std::string::npos) ready = static_cast<int>(i);
  }
  EXPECT_GE(extend, 0);
  EXPECT_LT(extend, ready);
}

TEST(Fastrestartd, Kill9OfTheEngineRestartsWarmFromTheDaemon) {
  Fastrestartd d;
  ASSERT_TRUE(d.notify().wait_for("READY=1")) << d.log();
  auto cold = d.engine_stats();
  EXPECT_EQ(cold["load"]["path"], "fallback") << cold.dump();
  pid_t engine = d.status()["engine"]["pid"];
  ASSERT_EQ(::kill(engine, SIGKILL), 0);
  ASSERT_TRUE(d.notify().wait_for("READY=1", 2)) << d.log();
  auto s = d.status();
  EXPECT_EQ(s["last_start"]["path"], "warm");
  EXPECT_EQ(restarts(s, "crash"), 1);
  EXPECT_NE(s["last_exit"]["detail"].get<std::string>().find("signal 9"), std::string::npos);
  // The engine itself says it attached and read (almost) nothing from disk.
  auto warm = d.engine_stats();
  EXPECT_EQ(warm["load"]["path"], "attach") << warm.dump();
  EXPECT_LT(warm["load"].value("disk_bytes_read", uint64_t{1} << 40), cold["load"].value("disk_bytes_read", uint64_t{0}) / 100);
  // The engine's own attach results reached the supervisor through the daemon's records.
  const auto& m = s["metrics"];
  EXPECT_EQ(m["attaches"]["fallback"], 1) << m.dump();
  EXPECT_EQ(m["attaches"]["miss"]["no entries"], 1) << m.dump();
  EXPECT_EQ(m["attaches"]["hit"], 1) << m.dump();
  EXPECT_EQ(m["time_to_ready"]["cold"]["count"], 1);
  EXPECT_EQ(m["time_to_ready"]["warm"]["count"], 1);
  std::printf("cold start %.3f s, warm restart %.3f s (exit to READY %.3f s)\n", cold["startup"].value("ready_s", 0.0),
              s["last_start"].value("time_to_ready_s", 0.0), s["last_start"].value("since_previous_exit_s", 0.0));
}

struct FaultCase {
  const char* flags;
  const char* cause;
};

void PrintTo(const FaultCase& c, std::ostream* os) { *os << c.cause; }

class FaultClasses : public ::testing::TestWithParam<FaultCase> {};

TEST_P(FaultClasses, AreRecognised) {
  Options o;
  o.engine_flags = GetParam().flags;
  if (std::string(GetParam().cause) == "start_timeout") o.startup_timeout_s = 1;
  Fastrestartd d(o);
  const std::string cause = GetParam().cause;
  ASSERT_TRUE(d.wait_status([&](const json& s) { return restarts(s, cause) >= 1; }, 60)) << d.log();
  auto s = d.status();
  EXPECT_EQ(s["last_exit"]["cause"], cause) << s["last_exit"].dump();
  EXPECT_NE(d.log().find("exited: " + cause), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Faults, FaultClasses,
    ::testing::Values(FaultCase{", \"--fault-exit-after-startup\", \"--fault-exit-code\", \"3\"", "crash"},
                      FaultCase{", \"--fault-exit-after-startup\", \"--fault-exit-code\", \"0\"", "unexpected_exit_0"},
                      FaultCase{", \"--fault-abort-after-requests\", \"1\"", "crash"},
                      FaultCase{", \"--fault-cuda-oom\"", "cuda_oom"},
                      FaultCase{", \"--fault-vllm-free-memory\"", "memory_utilization"},
                      FaultCase{", \"--fault-hang-after-requests\", \"1\"", "hung"},
                      FaultCase{", \"--fault-startup-delay\", \"30\"", "start_timeout"}),
    [](const auto& p) { return std::string(p.param.cause) + std::to_string(p.index); });

// A kernel OOM kill inside a memory cgroup (v1 on these machines, v2 elsewhere) is told from other SIGKILLs.
TEST(Fastrestartd, KernelOomKillIsRecognisedFromTheCgroup) {
  test::MemoryCgroup cgroup("fastrestart-test-" + std::to_string(::getpid()), 256 << 20);
  if (cgroup.dir().empty()) GTEST_SKIP() << cgroup.skip_reason();
  const std::string& dir = cgroup.dir();
  {
    Options o;
    o.engine_flags = ", \"--fault-grow-memory\", \"--fault-grow-memory-rate\", \"2048\"";
    o.extra = "";
    o.cgroup = dir;
    Fastrestartd d(o);
    EXPECT_TRUE(d.wait_status([](const json& s) { return restarts(s, "kernel_oom") >= 1; }, 60)) << d.log();
    EXPECT_EQ(d.status()["last_exit"]["cause"], "kernel_oom");
    d.stop();
  }
}

TEST(Fastrestartd, CrashLoopGivesUpWithAClearStatusAndExitCode3) {
  Options o;
  o.engine_flags = ", \"--fault-exit-after-startup\", \"--fault-exit-code\", \"7\"";
  o.crash_loop_limit = 3;
  Fastrestartd d(o);
  EXPECT_EQ(d.wait_exit(), 3) << d.log();
  EXPECT_TRUE(d.notify().wait_for("STATUS=Failed: 3 failures within", 1, 1)) << d.log();
  EXPECT_NE(d.log().find("exit code 7"), std::string::npos);
}

// Found before anything starts (check_host, docs/config.md "Checks of the host"): exit 2 naming file:line and
// the key, not a crash loop.
TEST(Fastrestartd, AnEngineThatCannotRunIsAConfigErrorBeforeAnythingStarts) {
  Options o;
  o.engine_binary = "/nonexistent/engine";
  o.crash_loop_limit = 2;
  Fastrestartd d(o);
  EXPECT_EQ(d.wait_exit(), 2) << d.log();
  EXPECT_NE(d.log().find(":6: engine.command: \"/nonexistent/engine\" cannot be executed: No such file or directory"),
            std::string::npos)
      << d.log();
  EXPECT_EQ(d.log().find("weightd"), std::string::npos) << "a daemon was started:\n" << d.log();
}

// Stop order (ARCHITECTURE.md): on SIGTERM the engine's whole group goes first, the daemons after.
TEST(Fastrestartd, SigtermStopsTheEngineGroupBeforeTheDaemons) {
  Options o;
  o.engine_flags = ", \"--fault-spawn-worker\", \"--fault-ignore-sigterm\", \"1\"";
  Fastrestartd d(o);
  ASSERT_TRUE(d.notify().wait_for("READY=1")) << d.log();
  auto s = d.status();
  pid_t engine = s["engine"]["pid"], daemon = s["daemons"][0]["pid"];
  pid_t worker = d.engine_stats().value("worker_pid", 0);
  ASSERT_GT(worker, 0);
  // The watcher alone touches `gone` until it is joined; it ends once all three are gone, or 30 s after
  // the start (a fixed wait after the stop missed a death on a loaded machine, the watcher not having run).
  std::map<pid_t, double> gone;
  std::thread watcher([&, deadline = now_s() + 30] {
    while (gone.size() < 3 && now_s() < deadline) {
      double t = now_s();
      for (pid_t p : {engine, worker, daemon})
        if (!gone.count(p) && ::kill(p, 0) != 0) gone[p] = t;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  double t0 = now_s();
  EXPECT_EQ(d.stop(), 0) << d.log();
  watcher.join();
  ASSERT_EQ(gone.size(), 3u);
  // The watcher polls every 2 ms, but on a loaded machine one gap can span every death: equal times say
  // nothing of the order. The daemon's own line (it got SIGTERM) must then follow the engine's exit.
  EXPECT_LE(gone[engine], gone[daemon]);
  EXPECT_LE(gone[worker], gone[daemon]) << "the engine's orphaned worker must be gone before the daemons stop";
  const std::string log = d.log();
  const auto exited = log.find("engine pid " + std::to_string(engine) + " exited");
  const auto daemon_told = log.find("received Terminated, shutting down");
  ASSERT_NE(exited, std::string::npos) << log;
  ASSERT_NE(daemon_told, std::string::npos) << log;
  EXPECT_LT(exited, daemon_told) << "the daemon was stopped before the engine's exit\n" << log;
  EXPECT_GE(gone[engine] - t0, 0.9) << "the engine ignored SIGTERM for 1 s; the daemon must have waited";
  EXPECT_TRUE(d.notify().wait_for("STOPPING=1", 1, 1));
}

TEST(Fastrestartd, ReloadWarmThenRollbackThenPersist) {
  Fastrestartd d;
  ASSERT_TRUE(d.notify().wait_for("READY=1")) << d.log();
  auto ok = d.ctl({"reload", "--add-flags", "--threads 3"});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("reloaded: path warm"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("--threads 3"), std::string::npos);
  EXPECT_TRUE(d.notify().wait_for("RELOADING=1"));
  EXPECT_TRUE(d.notify().wait_for("MONOTONIC_USEC="));

  auto bad = d.ctl({"reload", "--add-flags", "--max-model-len 999999"});
  EXPECT_EQ(bad.exit_code, 3) << bad.output;
  EXPECT_NE(bad.output.find("rolled back"), std::string::npos) << bad.output;
  auto s = d.status();
  EXPECT_EQ(s["state"], "ready");
  auto flags = s["flags"].dump();
  EXPECT_NE(flags.find("\"3\""), std::string::npos);
  EXPECT_EQ(flags.find("999999"), std::string::npos);

  // The pushed flags survive a restart of the supervisor.
  EXPECT_EQ(d.stop(), 0);
  d.start();
  ASSERT_TRUE(d.wait_status([](const json& j) { return j["state"] == "ready"; })) << d.log();
  EXPECT_NE(d.status()["flags"].dump().find("\"--threads\",\"3\""), std::string::npos) << d.status()["flags"].dump();
}

// systemctl reload (fastrestartctl reload with no flags) and SIGHUP re-read the config file.
TEST(Fastrestartd, ReloadWithoutFlagsAndSighupRereadTheConfig) {
  Fastrestartd d;
  ASSERT_TRUE(d.notify().wait_for("READY=1")) << d.log();
  auto same = d.ctl({"reload"});
  EXPECT_EQ(same.exit_code, 0) << same.output;
  auto edit = [&](const std::string& from, const std::string& to) {
    std::ifstream in(d.config());
    std::string text((std::istreambuf_iterator<char>(in)), {});
    auto pos = text.find(from);
    ASSERT_NE(pos, std::string::npos);
    text.replace(pos, from.size(), to);
    std::ofstream(d.config()) << text;
  };
  edit("\"--shutdown-grace\", \"2\"", "\"--shutdown-grace\", \"2\", \"--threads\", \"2\"");
  auto r = d.ctl({"reload"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--threads 2"), std::string::npos) << r.output;
  edit("\"--threads\", \"2\"", "\"--threads\", \"5\"");
  ::kill(d.pid(), SIGHUP);
  EXPECT_TRUE(d.wait_status([](const json& s) {
    return s["state"] == "ready" && s["flags"].dump().find("\"--threads\",\"5\"") != std::string::npos;
  })) << d.log();
  edit("port = ", "port = \"not a number\"\nx = ");
  auto bad = d.ctl({"reload"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("keeping the running config"), std::string::npos) << bad.output;
}

// The engine kind reads the running engine's output: a re-read keeps it, says so, and checks go on by it.
TEST(Fastrestartd, ARereadKeepsTheRunningEngineKind) {
  Fastrestartd d;
  ASSERT_TRUE(d.notify().wait_for("READY=1")) << d.log();
  std::ifstream in(d.config());
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const std::string from = "kind = \"generic\"";
  auto pos = text.find(from);
  ASSERT_NE(pos, std::string::npos) << text;
  text.replace(pos, from.size(), "kind = \"vllm\"");
  std::ofstream(d.config()) << text;
  auto r = d.ctl({"reload"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(d.log().find("engine.kind and engine.vllm_rules take effect at fastrestartd's next start (still generic)"),
            std::string::npos) << d.log();
  auto check = d.ctl({"check", "--json"});
  EXPECT_EQ(json::parse(check.output)["kind"], "generic") << check.output;
}

TEST(Fastrestartd, ReloadOfAWeightFlagReloadsTheDaemonsCold) {
  Options o;
  o.kind = "vllm";  // the tiny engine takes --dtype like vLLM; kind vllm knows --dtype changes the weights
  Fastrestartd d(o);
  ASSERT_TRUE(d.notify().wait_for("READY=1")) << d.log();
  pid_t daemon = d.status()["daemons"][0]["pid"];
  auto r = d.ctl({"reload", "--add-flags", "--dtype float32", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto j = json::parse(r.output);
  EXPECT_EQ(j["cold_reload"], true);
  EXPECT_EQ(j["path"], "cold");
  EXPECT_NE(d.status()["daemons"][0]["pid"], daemon) << "the daemons were restarted";
}

TEST(Fastrestartd, ADeadDaemonIsRespawnedAndTheEngineKeepsServing) {
  Fastrestartd d;
  ASSERT_TRUE(d.notify().wait_for("READY=1")) << d.log();
  auto s = d.status();
  pid_t daemon = s["daemons"][0]["pid"], engine = s["engine"]["pid"];
  ASSERT_EQ(::kill(daemon, SIGKILL), 0);
  ASSERT_TRUE(d.wait_status([&](const json& j) {
    return j["daemons"][0]["pid"] != daemon && j["daemons"][0]["state"] != "dead";
  })) << d.log();
  EXPECT_EQ(d.status()["engine"]["pid"], engine) << "the engine keeps its mapping and keeps running";
  EXPECT_EQ(d.engine_stats()["state"], "ready");
  EXPECT_NE(d.log().find("respawning in"), std::string::npos);
}

// After an engine's readiness passes, the daemons' attach records decide its path, asked on the thread
// pool. A daemon that does not answer holds that query for its call timeout; the engine is restarted
// meanwhile, and the answer, when it comes, is about the engine that is gone: applied to the next one it
// would make that one ready unprobed, to be killed at the start deadline (the soak found this).
TEST(Fastrestartd, ALateAttachResultIsNotAppliedToTheNextEngine) {
  Options o;
  o.engine_flags = ", \"--fault-token-delay\", \"0.6\"";  // readiness takes 0.6 s after the load
  o.startup_timeout_s = 8;
  Fastrestartd d(o);
  ASSERT_TRUE(d.notify().wait_for("READY=1")) << d.log();
  auto s = d.status();
  const pid_t daemon = s["daemons"][0]["pid"], first = s["engine"]["pid"];
  auto engine_pid = [](const json& j) -> pid_t { return j["engine"].is_object() ? j["engine"].value("pid", 0) : 0; };
  ASSERT_EQ(d.ctl({"restart"}).exit_code, 0);
  // The second engine attaches (the first published); the daemon is stopped before its readiness passes.
  pid_t second = 0;
  auto until = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < until) {
    const pid_t p = engine_pid(d.status());
    const json load = d.engine_stats()["load"];
    if (p != first && p > 0 && load.is_object() && load.value("path", "") == "attach") {
      second = p;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GT(second, 0) << d.log();
  ASSERT_EQ(::kill(daemon, SIGSTOP), 0);
  ASSERT_TRUE(d.wait_status([&](const json& j) { return j["state"] == "ready" && engine_pid(j) == second; }, 20))
      << d.log();
  ASSERT_EQ(d.ctl({"restart"}).exit_code, 0);
  const bool spawned = d.wait_status([&](const json& j) {
    const pid_t p = engine_pid(j);
    return p != second && p > 0;
  }, 20);
  ::kill(daemon, SIGCONT);
  ASSERT_TRUE(spawned) << d.log();
  pid_t third = d.status()["engine"]["pid"];
  // The third engine is ready by its own probe, not by the second one's late answer.
  EXPECT_TRUE(d.wait_status([&](const json& j) {
    return j["state"] == "ready" && engine_pid(j) == third && !j["engine"].value("path", "").empty();
  }, 20)) << d.log();
  EXPECT_EQ(restarts(d.status(), "start_timeout"), 0) << d.log();
  EXPECT_NE(d.log().find("engine pid " + std::to_string(second) + " is gone or stopping: its attach result is dropped"),
            std::string::npos)
      << "the daemon answered before the second engine stopped: the case was not exercised\n" << d.log();
}

TEST(Fastrestartd, ADaemonThatCannotStartDoesNotStopTheEngine) {
  Options o;
  test::TempDir scratch;  // the weight daemon's socket dir (made 0700 by fastrestartd): this test's own, never the system's default
  o.gpus_and_weights = "[weights]\nbackend = \"host\"\ndaemon_path = \"/bin/false\"\ncheckpoint = \"" + checkpoint_dir() +
                       "\"\nsocket_dir = \"" + (scratch / "run") + "\"\n";
  o.engine_flags = ", \"--fastrestart-connect-timeout\", \"0.1\"";
  Fastrestartd d(o);
  ASSERT_TRUE(d.notify().wait_for("READY=1")) << d.log();
  EXPECT_NE(d.log().find("died while loading"), std::string::npos) << d.log();
  EXPECT_EQ(d.status()["last_start"]["path"], "cold");
}

// While the daemons preload, STATUS= and fastrestartctl status show the progress (bytes, rate, ETA).
// The daemon's reads wait at a gate the test opens once it has seen all of that, so however slow the
// machine (ASan, 2 loaded cores) the preload is still running when the test looks.
TEST(Fastrestartd, LoadProgressIsShownWhileTheDaemonsPreload) {
  Options o;
  test::TempDir scratch;  // the daemon's socket dir and the gate: this test's own, never the system's default
  const std::string gate = scratch / "release-reads";
  o.gpus_and_weights = "[weights]\nbackend = \"host\"\ncheckpoint = \"" + checkpoint_dir() + "\"\nsocket_dir = \"" +
                       (scratch / "run") + "\"\nkey = {arch = \"tinyengine\", dtype = \"F32\", engine = \"fastrestart-tinyengine " FR_PROJECT_VERSION
                       "\", tp_rank = \"0\", tp_size = \"1\"}\n";  // the tiny engine's whole key (checked at start)
  o.daemon_read_gate = gate;
  o.engine_flags = ", \"--fastrestart-connect-timeout\", \"0.1\"";
  Fastrestartd d(o);
  ASSERT_TRUE(d.wait_status([](const json& s) { return s["state"] == "loading" && !s["daemons"].empty() &&
                                                     s["daemons"][0]["progress"].value("total_bytes", 0) > 0; }))
      << d.log();
  auto table = d.ctl({"status"});
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_NE(table.output.find("loading"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("[.."), std::string::npos) << "a progress bar:\n" << table.output;
  EXPECT_NE(table.output.find("GB/s, ETA"), std::string::npos) << table.output;
  EXPECT_TRUE(d.notify().wait_for("STATUS=Loading weights: ", 1, 10)) << d.log();
  EXPECT_TRUE(d.notify().wait_for("EXTEND_TIMEOUT_USEC=", 1, 10));
  { std::ofstream release(gate); }  // the reads go on; the load completes
  ASSERT_TRUE(d.notify().wait_for("READY=1", 1, 60)) << d.log();
}

TEST(Fastrestartd, StopEngineHoldsItUntilStartEngine) {
  Fastrestartd d;
  ASSERT_TRUE(d.notify().wait_for("READY=1")) << d.log();
  EXPECT_EQ(d.ctl({"stop-engine"}).exit_code, 0);
  ASSERT_TRUE(d.wait_status([](const json& j) { return j["state"] == "held"; })) << d.log();
  EXPECT_EQ(d.ctl({"start-engine"}).exit_code, 0);
  ASSERT_TRUE(d.notify().wait_for("READY=1", 2)) << d.log();
  EXPECT_EQ(d.status()["last_start"]["path"], "warm");
}

// Memory accounting (ARCHITECTURE.md) with the NVML seam: the engine's share of the budget, and the leak check after an exit.
TEST(Fastrestartd, GpuBudgetAndLeakCheckThroughTheNvmlSeam) {
  test::TempDir gpu;
  const std::string nvml = gpu / "nvml.json";
  auto set_used = [&](double gb) {
    std::ofstream(nvml) << json{{"0", {{"total", uint64_t{100} << 30}, {"used", static_cast<uint64_t>(gb * (1 << 30))},
                                       {"uuid", "GPU-00000000-0000-0000-0000-000000000000"}, {"name", "Fake GPU"}}}}.dump();
  };
  set_used(1);
  Options o;
  o.fake_nvml = nvml;
  o.gpus_and_weights = "[weights]\nmode = \"off\"\n[memory]\nutilization = 0.8\nleak_tolerance_mib = 256\nsettle_timeout_s = 1\n";
  o.gpus = "[\"0\"]";
  o.engine_flags = ", \"--fastrestart-connect-timeout\", \"0.1\"";  // no daemons in this test
  Fastrestartd d(o);
  ASSERT_TRUE(d.wait_status([](const json& s) { return s["state"] == "ready"; })) << d.log();
  EXPECT_NE(d.log().find("--gpu-memory-utilization 0.8"), std::string::npos) << d.log();
  auto s = d.status();
  ASSERT_EQ(s["memory"].size(), 1u) << s.dump();
  EXPECT_EQ(s["memory"][0]["budget_bytes"], static_cast<uint64_t>(0.8 * static_cast<double>(uint64_t{100} << 30)));
  // The engine dies and its memory does not come back (an orphaned worker would do this).
  set_used(30);
  ::kill(s["engine"]["pid"].get<pid_t>(), SIGKILL);
  ASSERT_TRUE(d.wait_status([](const json& j) { return j["state"] == "ready" && j["restarts"].value("crash", 0) == 1; })) << d.log();
  EXPECT_NE(d.log().find("still used after the engine exited"), std::string::npos) << d.log();
}

// docs/health.md through the real supervisor: probes follow the lifecycle, metrics count what happened.
TEST(Fastrestartd, HttpProbesAndMetricsFollowTheLifecycle) {
  Options o;
  o.http_port = test::free_port();
  Fastrestartd d(o);
  auto get = [&](const std::string& path) {
    auto r = test::run({"/usr/bin/curl", "-s", "-w", "\n%{http_code}",
                        "http://127.0.0.1:" + std::to_string(o.http_port) + path});
    auto nl = r.output.rfind('\n');
    return std::make_pair(r.output.substr(nl + 1), r.output.substr(0, nl));
  };
  ASSERT_TRUE(d.notify().wait_for("READY=1")) << d.log();
  EXPECT_EQ(get("/health").first, "200");
  EXPECT_EQ(get("/ready").first, "200");
  EXPECT_EQ(json::parse(get("/status").second)["state"], "ready");
  pid_t engine = d.status()["engine"]["pid"];
  ::kill(engine, SIGKILL);
  ASSERT_TRUE(d.notify().wait_for("READY=1", 2)) << d.log();
  auto metrics = get("/metrics");
  EXPECT_EQ(metrics.first, "200");
  EXPECT_NE(metrics.second.find("fastrestart_restarts_total{cause=\"crash\"} 1"), std::string::npos) << metrics.second;
  EXPECT_NE(metrics.second.find("fastrestart_weight_attaches_total{result=\"hit\"} 1"), std::string::npos) << metrics.second;
  EXPECT_NE(metrics.second.find("fastrestart_time_to_ready_seconds_count{path=\"warm\"} 1"), std::string::npos) << metrics.second;
  // A reload on the warm cache, then one that is rolled back.
  EXPECT_EQ(d.ctl({"reload", "--add-flags", "--threads 3"}).exit_code, 0);
  EXPECT_EQ(d.ctl({"reload", "--add-flags", "--max-model-len 999999"}).exit_code, 3);
  // A forced miss: the daemon loses its entry, the next start falls back to disk and says why.
  auto ev = test::run({test::weightctl(), "--socket-dir", d.dir() / "run", "evict", "--all"});
  ASSERT_EQ(ev.exit_code, 0) << ev.output;
  EXPECT_EQ(d.ctl({"restart"}).exit_code, 0);
  ASSERT_TRUE(d.wait_status([](const json& j) {
    return j["state"] == "ready" && j["metrics"]["attaches"]["fallback"].get<int>() == 2;
  })) << d.log();
  metrics = get("/metrics");
  for (const char* want : {"fastrestart_reloads_total{result=\"warm\"} 1", "fastrestart_reloads_total{result=\"rolled_back\"} 1",
                           "fastrestart_weight_attaches_total{result=\"miss\",reason=\"no entries\"} 2",
                           "fastrestart_weight_attaches_total{result=\"fallback\"} 2", "fastrestart_engine_up 1"})
    EXPECT_NE(metrics.second.find(want), std::string::npos) << want << "\n" << metrics.second;
  if (::access("/usr/bin/promtool", X_OK) == 0) {
    std::string file = d.dir() / "metrics.txt";
    std::ofstream(file) << metrics.second;
    auto check = test::run({"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + file});
    EXPECT_EQ(check.exit_code, 0) << check.output;
  }
  EXPECT_EQ(d.ctl({"stop-engine"}).exit_code, 0);
  ASSERT_TRUE(d.wait_status([](const json& j) { return j["state"] == "held"; })) << d.log();
  auto ready = get("/ready");
  EXPECT_EQ(ready.first, "503");
  EXPECT_NE(ready.second.find("held"), std::string::npos) << ready.second;
  EXPECT_EQ(get("/health").first, "200") << "liveness must not depend on the engine";
}

TEST(Fastrestartd, BadConfigExitsWith2NamingFileLineAndKey) {
  test::TempDir dir;
  std::string cfg = dir / "bad.toml";
  std::ofstream(cfg) << "[engine]\ncommand = [\"x\"]\nport = 70000\n";
  auto r = test::run({FR_FASTRESTARTD_BIN, "--config", cfg});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(cfg + ":3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("engine.port"), std::string::npos) << r.output;
}

TEST(Fastrestartd, ControlSocketRefusesOtherUids) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  Fastrestartd d;
  ASSERT_TRUE(d.notify().wait_for("READY=1")) << d.log();
  auto r = test::run({FR_FASTRESTARTCTL_BIN, "--socket", d.dir() / "ctl/t.ctl", "status"}, 65534, 65534);
  EXPECT_NE(r.exit_code, 0);
}

}  // namespace
}  // namespace fr
