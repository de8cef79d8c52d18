// Start paths end to end (docs/supervisor.md, "Start paths"): the real fastrestartd, the tiny engine and a
// real weight daemon on the host backend. restart.start decides how each restart comes up, and every path
// that was skipped shows why; rolled-back pushes are not engine crashes; a warm start that misses says why.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>

#include "support/fastrestartd_config.h"
#include "support/harness.h"
#include "support/supervised.h"

namespace fr {
namespace {

using nlohmann::json;

struct Options {
  std::string start = "[\"warm\", \"cold\"]";
  int crash_loop_limit = 5;
  std::string engine_socket_dir;  // the engine's --fastrestart-socket-dir; empty: the daemons' own
  int warm_failures_before_cold = 0;
  std::string wrapper;            // a program run as `wrapper tinyengine serve ...`; empty: none
  std::string daemon_path;        // weights.daemon_path; empty: fastrestart-weightd found as usual
};

class StartPathsTest : public ::testing::Test {
 protected:
  void launch(const Options& s = {}) {
    ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", m_dir / "model", "--size", "4M"}).exit_code, 0);
    m_port = test::free_port();
    m_http = test::free_port();
    const std::string run = m_dir / "run";
    test::FastrestartdConfig c(m_dir.path());
    c.tiny_engine({.binary = FR_TINYENGINE_BIN, .model = m_dir / "model", .port = m_port,
                   .wrapper = s.wrapper.empty() ? std::vector<std::string>{} : std::vector<std::string>{s.wrapper},
                   .flags = {"--load-format", "fastrestart", "--fastrestart-socket-dir",
                             s.engine_socket_dir.empty() ? run : s.engine_socket_dir, "--shutdown-grace", "2"}})
        .number("engine", "stop_grace_s", 3)
        .host_weights(m_dir / "model", run)
        .text("readiness", "model", "t").number("readiness", "poll_interval_s", 0.05).number("readiness", "check_interval_s", 0.3)
        .number("restart", "backoff_initial_s", 0.05).number("restart", "backoff_max_s", 0.2)
        .number("restart", "crash_loop_limit", s.crash_loop_limit)
        .number("restart", "warm_failures_before_cold", s.warm_failures_before_cold).set("restart", "start", s.start)
        .http(m_http);
    if (!s.daemon_path.empty()) c.text("weights", "daemon_path", s.daemon_path);
    m_cfg = c.write();
    m_sup = test::start_fastrestartd(FR_FASTRESTARTD_BIN, c);
  }
  // Waits for READY of an engine other than `not_pid`; returns the status then.
  json ready(pid_t not_pid = 0) { return m_sup->expect_ready(not_pid); }
  json engine_stats() { return json::parse(test::http_get(m_port, "/stats").body, nullptr, false); }
  test::RunResult ctl(std::vector<std::string> args) {
    std::vector<std::string> argv{FR_FASTRESTARTCTL_BIN, "--socket", m_dir / "ctl/t.ctl"};
    argv.insert(argv.end(), args.begin(), args.end());
    return test::run(argv);
  }
  static json find_path(const json& attempts, const std::string& path) { return test::find_start_path(attempts, path); }

  test::TempDir m_dir;
  uint16_t m_port = 0, m_http = 0;
  std::string m_cfg;
  std::unique_ptr<test::Supervised> m_sup;
};

// start = ["cold"]: every restart reloads the daemons first, so no restart attaches to weights from before.
TEST_F(StartPathsTest, ColdOnlyReloadsTheDaemonsBeforeEveryRestart) {
  Options s;
  s.start = "[\"cold\"]";
  launch(s);
  json st = ready();
  for (int round = 0; round < 2; ++round) {
    const pid_t engine = st["engine"]["pid"], daemon = st["daemons"][0]["pid"];
    ASSERT_EQ(::kill(engine, SIGKILL), 0);
    st = ready(engine);
    EXPECT_EQ(st["last_start"]["path"], "cold") << st.dump();
    EXPECT_NE(st["daemons"][0]["pid"], daemon) << "the daemons were not reloaded";
    EXPECT_EQ(engine_stats()["load"]["path"], "fallback") << "the engine must load from disk, not attach";
    const json cold = find_path(st["start_paths"], "cold");
    EXPECT_EQ(st["start_paths"].size(), 2u) << st["start_paths"].dump();
    EXPECT_EQ(st["start_paths"][0].value("outcome", ""), "waiting") << st["start_paths"].dump();
    EXPECT_EQ(st["start_paths"][1].value("outcome", ""), "started") << st["start_paths"].dump();
  }
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// start = ["warm", "cold"]: the first start skips warm (nothing held yet) and says so; a restart attaches.
TEST_F(StartPathsTest, WarmThenColdAttachesOnRestartAndShowsWhyWarmWasSkipped) {
  launch();
  json st = ready();
  EXPECT_EQ(st["last_start"]["path"], "cold");
  const json warm = find_path(st["start_paths"], "warm");
  EXPECT_EQ(warm.value("outcome", ""), "skipped") << st["start_paths"].dump();
  EXPECT_EQ(warm.value("reason", ""), "nothing_held") << st["start_paths"].dump();
  EXPECT_NE(warm.value("detail", "").find("hold no weights"), std::string::npos) << warm.dump();
  EXPECT_NE(st.value("status_text", "").find("skipped warm: "), std::string::npos) << st.value("status_text", "");
  EXPECT_NE(ctl({"status"}).output.find("start path         warm skipped: "), std::string::npos) << ctl({"status"}).output;

  const pid_t engine = st["engine"]["pid"], daemon = st["daemons"][0]["pid"];
  ASSERT_EQ(::kill(engine, SIGKILL), 0);
  st = ready(engine);
  EXPECT_EQ(st["last_start"]["path"], "warm") << st.dump();
  EXPECT_EQ(st["daemons"][0]["pid"], daemon);
  EXPECT_EQ(engine_stats()["load"]["path"], "attach");
  EXPECT_EQ(find_path(st["start_paths"], "warm").value("outcome", ""), "started") << st["start_paths"].dump();
  const std::string metrics = test::http_get(m_http, "/metrics").body;
  EXPECT_NE(metrics.find("fastrestart_start_path_total{path=\"warm\",outcome=\"skipped\",reason=\"nothing_held\"} 1"),
            std::string::npos) << metrics;
  EXPECT_NE(metrics.find("fastrestart_start_path_total{path=\"warm\",outcome=\"started\",reason=\"\"} 1"), std::string::npos)
      << metrics;
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// Rejected pushes (each rolled back, the engine healthy again) are not failures of the running
// configuration: after five of them one kill -9 restarts the engine instead of giving up (crash_loop_limit 5).
TEST_F(StartPathsTest, RolledBackPushesAreCountedApartFromCrashes) {
  launch();
  json st = ready();
  for (int i = 0; i < 5; ++i) {
    auto r = ctl({"reload", "--add-flags", "--max-model-len 999999"});
    ASSERT_EQ(r.exit_code, 3) << r.output << m_sup->log();
  }
  st = m_sup->status();
  EXPECT_EQ(st["state"], "ready");
  EXPECT_EQ(st["rollbacks"].value("count", 0), 5) << st["rollbacks"].dump();
  EXPECT_EQ(st["rollbacks"]["recent"].size(), 5u);
  EXPECT_FALSE(st["rollbacks"]["recent"][0].value("detail", "").empty()) << st["rollbacks"].dump();
  EXPECT_EQ(st["restarts"].value("crash", 0), 0) << st["restarts"].dump();
  EXPECT_NE(ctl({"status"}).output.find("rollbacks          5"), std::string::npos) << ctl({"status"}).output;
  const std::string metrics = test::http_get(m_http, "/metrics").body;
  EXPECT_NE(metrics.find("fastrestart_reload_rollbacks_total{cause="), std::string::npos) << metrics;

  const pid_t engine = st["engine"]["pid"];
  ASSERT_EQ(::kill(engine, SIGKILL), 0);
  st = ready(engine);
  EXPECT_EQ(st["restarts"].value("crash", 0), 1) << st["restarts"].dump();
  EXPECT_EQ(st.value("failure", ""), "");
  EXPECT_EQ(m_sup->log().find("giving up"), std::string::npos) << m_sup->log();
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// A start on the warm path whose engine does not attach says why in status: here the engine looks for the
// daemons in another directory, so it never asks them.
TEST_F(StartPathsTest, AWarmStartThatMissesSaysWhy) {
  Options s;
  s.engine_socket_dir = m_dir / "elsewhere";
  launch(s);
  json st = ready();
  const pid_t engine = st["engine"]["pid"];
  ASSERT_EQ(::kill(engine, SIGKILL), 0);
  st = ready(engine);
  EXPECT_EQ(st["last_start"]["path"], "cold") << st.dump();
  EXPECT_EQ(st["last_start"].value("expected", ""), "warm") << st.dump();
  EXPECT_NE(st["last_start"].value("warm_miss", "").find("did not ask the weight daemons"), std::string::npos) << st.dump();
  EXPECT_NE(st.value("status_text", "").find("expected warm: "), std::string::npos) << st.value("status_text", "");
  EXPECT_NE(ctl({"status"}).output.find("warm miss"), std::string::npos);
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// Failed warm starts escalate to a cold reload of the daemons (restart.warm_failures_before_cold): the
// next engine waits for the fresh daemons, and they run and serve the start after. A status poll while
// the daemons were stopping (or a reply from before the stop) once started the engine at once on daemons
// that were going away, and nothing restarted them (seen on the H200). The daemon here takes 3 s to stop,
// so the supervisor's 2 s status poll falls inside its stop.
TEST_F(StartPathsTest, FailedWarmStartsReloadTheDaemonsAndTheNextEngineWaitsForThem) {
  const std::string slow_daemon = m_dir / "slow-stopping-weightd.sh";
  std::ofstream(slow_daemon) << "#!/bin/bash\n\"" << test::weightd() << "\" \"$@\" &\nchild=$!\n"
                             << "trap 'sleep 3; kill -TERM $child; wait $child; exit 0' TERM\nwait $child\nwait $child\n";
  ASSERT_EQ(::chmod(slow_daemon.c_str(), 0755), 0);
  // The second and third starts (the first warm ones) exit 1 before they are ready.
  const std::string wrapper = m_dir / "fail-2-and-3.sh";
  std::ofstream(wrapper) << "#!/bin/sh\nf=\"" << (m_dir / "starts") << "\"\nn=$(cat \"$f\" 2>/dev/null || echo 0)\n"
                         << "n=$((n + 1))\necho $n > \"$f\"\n"
                         << "if [ $n -eq 2 ] || [ $n -eq 3 ]; then echo 'failing start' $n; exit 1; fi\nexec \"$@\"\n";
  ASSERT_EQ(::chmod(wrapper.c_str(), 0755), 0);
  Options o;
  o.wrapper = wrapper;
  o.daemon_path = slow_daemon;
  o.warm_failures_before_cold = 2;
  launch(o);
  json st = ready();
  const pid_t engine = st["engine"]["pid"], daemon = st["daemons"][0]["pid"];
  ASSERT_EQ(::kill(engine, SIGKILL), 0);
  st = ready(engine);
  EXPECT_NE(st["daemons"][0]["pid"], daemon) << "the daemons were not reloaded: " << st.dump();
  EXPECT_EQ(st["daemons"][0]["state"], "ready") << st.dump();
  EXPECT_NE(m_sup->log().find("warm starts keep failing: reloading the weight daemons cold"), std::string::npos) << m_sup->log();
  // The fresh daemons serve the next restart.
  const pid_t next = st["engine"]["pid"];
  ASSERT_EQ(::kill(next, SIGKILL), 0);
  st = ready(next);
  EXPECT_EQ(st["last_start"]["path"], "warm") << st.dump();
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

}  // namespace
}  // namespace fr
