// The standby start path end to end (docs/standby.md): the real fastrestartd, the tiny engine on the host
// backend as both the engine and its standby, and a real weight daemon. A standby parks at its gate, is
// released when the engine dies or is restarted, and is replaced, discarded or given up on as documented.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "support/fastrestartd_config.h"
#include "support/harness.h"
#include "support/supervised.h"

namespace fr {
namespace {

using nlohmann::json;

struct Options {
  std::string level = "pre_gpu";
  std::string engine_flags;     // appended to the engine's flags (faults)
  std::string standby_extra;    // more [standby] keys
  std::string cgroup;           // engine.cgroup
  std::string engine_extra;     // more [engine] keys
  bool fake_gpu = false;        // gpus = ["0"], no weight daemons, a tight leak check
  std::string fake_nvml;        // FASTRESTART_FAKE_NVML for fastrestartd
  std::string wrapper;          // a program that engine.command runs the tiny engine through
};

class StandbyTest : public ::testing::Test {
 protected:
  void launch(const Options& o = {}) {
    ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", m_dir / "model", "--size", "4M"}).exit_code, 0);
    m_port = test::free_port();
    m_http = test::free_port();
    const std::string run = m_dir / "run";
    test::FastrestartdConfig c(m_dir.path());
    c.tiny_engine({.binary = FR_TINYENGINE_BIN, .model = m_dir / "model", .port = m_port,
                   .wrapper = o.wrapper.empty() ? std::vector<std::string>{} : std::vector<std::string>{o.wrapper},
                   .flags = {"--load-format", "fastrestart", "--fastrestart-socket-dir", run, "--shutdown-grace", "2"},
                   .more_flags = o.engine_flags})
        .number("engine", "stop_grace_s", 3).lines("engine", o.engine_extra)
        .text("readiness", "model", "t").text("readiness", "expect_text", oracle())
        .number("readiness", "poll_interval_s", 0.05).number("readiness", "check_interval_s", 0.3)
        .number("restart", "backoff_initial_s", 0.05).number("restart", "backoff_max_s", 0.2)
        .number("restart", "crash_loop_limit", 50).number("restart", "warm_failures_before_cold", 0)
        .words("restart", "start", {"standby", "warm", "cold"})
        .text("standby", "level", o.level).lines("standby", o.standby_extra)
        .http(m_http);
    if (!o.cgroup.empty()) c.text("engine", "cgroup", o.cgroup);
    if (o.fake_gpu) {
      c.words("", "gpus", {"0"}).text("weights", "mode", "off");
      c.number("memory", "leak_tolerance_mib", 256).number("memory", "settle_timeout_s", 1);
    } else {
      c.host_weights(m_dir / "model", run);
    }
    m_cfg = c.write();
    m_sup = test::start_fastrestartd(FR_FASTRESTARTD_BIN, c, "d.log", o.fake_nvml);
  }
  // One fake 80 GB GPU (FASTRESTART_FAKE_NVML) whose used memory the test sets (used_gb), no weight
  // daemons: for the memory budget and the leak check.
  void launch_on_fake_gpu(const std::string& level = "pre_gpu", const std::string& standby_extra = "") {
    used_gb(1);
    Options o;
    o.level = level;
    o.standby_extra = standby_extra;
    o.fake_gpu = true;
    o.engine_flags = ", \"--fastrestart-connect-timeout\", \"0.1\"";  // no daemons here
    o.fake_nvml = m_dir / "nvml.json";
    launch(o);
  }
  void used_gb(double gb) {
    std::ofstream(m_dir / "nvml.json") << "{\"0\": {\"total\": 80000000000, \"used\": " << static_cast<uint64_t>(gb * 1e9) << "}}";
  }
  // The completion of the readiness prompt by a normal engine on the same model (the oracle).
  std::string oracle() {
    if (!m_oracle.empty()) return m_oracle;
    const uint16_t port = test::free_port();
    const pid_t c = test::spawn_logged({FR_TINYENGINE_BIN, "serve", m_dir / "model", "--port", std::to_string(port),
                                        "--served-model-name", "t"}, m_dir / "oracle.log");
    json r;
    for (int i = 0; i < 400; ++i) {
      auto a = test::http_post(port, "/v1/completions", {{"model", "t"}, {"prompt", "The capital of France is"}, {"max_tokens", 1}});
      if (a.status == 200) {
        r = json::parse(a.body, nullptr, false);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ::kill(c, SIGKILL);
    ::waitpid(c, nullptr, 0);
    m_oracle = r.is_object() ? r["choices"][0].value("text", "") : "";
    EXPECT_FALSE(m_oracle.empty()) << "the oracle engine did not answer";
    return m_oracle;
  }
  // Waits for READY of an engine other than `not_pid`; returns the status then.
  json ready(pid_t not_pid = 0) { return m_sup->expect_ready(not_pid); }
  // Waits for a parked standby other than `not_pid`; returns the status then.
  json parked(pid_t not_pid = 0) { return m_sup->expect_parked(not_pid); }
  test::RunResult ctl(std::vector<std::string> args) {
    std::vector<std::string> argv{FR_FASTRESTARTCTL_BIN, "--socket", m_dir / "ctl/t.ctl"};
    argv.insert(argv.end(), args.begin(), args.end());
    return test::run(argv);
  }
  static json find_path(const json& attempts, const std::string& path) { return test::find_start_path(attempts, path); }
  bool port_answers() { return test::http_get(m_port, "/health", 1).status != 0; }
  std::string completion() {
    auto a = test::http_post(m_port, "/v1/completions", {{"model", "t"}, {"prompt", "The capital of France is"}, {"max_tokens", 1}});
    auto j = json::parse(a.body, nullptr, false);
    return j.is_object() && j.contains("choices") ? j["choices"][0].value("text", "") : "";
  }

  test::TempDir m_dir;
  uint16_t m_port = 0, m_http = 0;
  std::string m_cfg, m_oracle;
  std::unique_ptr<test::Supervised> m_sup;
};

class StandbyLevels : public StandbyTest, public ::testing::WithParamInterface<const char*> {};

// kill -9 of the engine: the parked standby becomes the engine (its pid, path "standby"), answers as the
// oracle, and a new standby parks behind it. The standby never listened on the port while parked.
TEST_P(StandbyLevels, AKilledEngineIsReplacedByTheParkedStandby) {
  Options o;
  o.level = GetParam();
  launch(o);
  json st = ready();
  EXPECT_EQ(st["last_start"]["path"], "cold");
  EXPECT_EQ(find_path(st["start_paths"], "standby").value("reason", ""), "not_parked") << st["start_paths"].dump();
  for (int round = 0; round < 3; ++round) {
    st = parked();
    const pid_t engine = st["engine"]["pid"], standby = st["standby"]["pid"];
    EXPECT_EQ(st["standby"]["level"], GetParam());
    EXPECT_NE(engine, standby);
    ASSERT_EQ(::kill(engine, SIGKILL), 0);
    st = ready(engine);
    EXPECT_EQ(st["engine"]["pid"], standby) << "the standby was not the one released: " << st.dump();
    EXPECT_EQ(st["last_start"]["path"], "standby") << st.dump();
    EXPECT_EQ(st["last_start"]["standby_level"], GetParam());
    EXPECT_EQ(find_path(st["start_paths"], "standby").value("outcome", ""), "started") << st["start_paths"].dump();
    EXPECT_EQ(completion(), oracle());
    EXPECT_TRUE(st["standby"]["last_release"].is_object()) << st["standby"].dump();
  }
  st = parked();
  EXPECT_EQ(st["standby"]["releases"], 3);
  EXPECT_GE(st["standby"]["spawns"].get<int>(), 4);
  EXPECT_EQ(st["restarts"].value("crash", 0), 3);
  const std::string metrics = test::http_get(m_http, "/metrics").body;
  EXPECT_NE(metrics.find("fastrestart_standby_parked{level=\"" + std::string(GetParam()) + "\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("fastrestart_standby_releases_total 3"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("fastrestart_start_path_total{path=\"standby\",outcome=\"started\",reason=\"\"} 3"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("fastrestart_time_to_ready_seconds_count{path=\"standby\"} 3"), std::string::npos) << metrics;
  const std::string human = ctl({"status"}).output;
  EXPECT_NE(human.find("standby            parked at " + std::string(GetParam())), std::string::npos) << human;
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

INSTANTIATE_TEST_SUITE_P(Levels, StandbyLevels, ::testing::Values("pre_gpu", "warmed"));

// `fastrestartctl restart` with unchanged flags releases the standby; the old engine is gone first.
TEST_F(StandbyTest, ARestartRequestReleasesTheStandby) {
  launch();
  json st = ready();
  st = parked();
  const pid_t engine = st["engine"]["pid"], standby = st["standby"]["pid"];
  ASSERT_EQ(ctl({"restart"}).exit_code, 0);
  st = ready(engine);
  EXPECT_EQ(st["engine"]["pid"], standby) << st.dump();
  EXPECT_EQ(st["last_start"]["path"], "standby");
  EXPECT_EQ(st["last_exit"]["cause"], "requested");
  EXPECT_NE(::kill(engine, 0), 0) << "the old engine still runs beside the released standby";
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// The checkpoint changed under the same path while a standby was parked: the standby read the old files
// (and, warmed, maps their weights), so it is not released; the next path starts the engine on the new
// files, and a standby on them follows.
TEST_F(StandbyTest, AChangedCheckpointDiscardsTheStandby) {
  launch();
  ready();
  json st = parked();
  const pid_t engine = st["engine"]["pid"], old_standby = st["standby"]["pid"];
  int touched = 0;
  for (const auto& f : std::filesystem::directory_iterator(m_dir / "model"))
    if (f.path().extension() == ".safetensors") {
      std::filesystem::last_write_time(f.path(), std::filesystem::file_time_type::clock::now() + std::chrono::hours(1));
      ++touched;
    }
  ASSERT_GT(touched, 0);
  ASSERT_EQ(::kill(engine, SIGKILL), 0);
  st = ready(engine);
  EXPECT_NE(st["engine"]["pid"], old_standby) << "the standby on the old checkpoint was released";
  EXPECT_NE(st["last_start"]["path"], "standby") << st.dump();
  const json sb = find_path(st["start_paths"], "standby");
  EXPECT_EQ(sb.value("reason", ""), "unavailable") << st["start_paths"].dump();
  EXPECT_NE(sb.value("detail", "").find("the checkpoint changed since the standby started"), std::string::npos) << sb.dump();
  st = parked(old_standby);
  EXPECT_NE(::kill(old_standby, 0), 0) << "the standby on the old checkpoint still runs";
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// Not only the weights: the standby read the model's config.json (and tokenizer, chat template) during its
// start, so a rewritten config.json beside unchanged weights retires it as well.
TEST_F(StandbyTest, AChangedConfigJsonDiscardsTheStandby) {
  ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", m_dir / "model", "--size", "4M"}).exit_code, 0);
  std::ofstream(m_dir / "model/config.json") << "{\"max_position_embeddings\": 4096}\n";
  launch();
  ready();
  json st = parked();
  const pid_t engine = st["engine"]["pid"], old_standby = st["standby"]["pid"];
  {
    // Rewritten in place with another size: its identity changes whatever the clock's resolution.
    std::ofstream(m_dir / "model/config.json") << "{\"max_position_embeddings\": 131072}\n";
  }
  ASSERT_EQ(::kill(engine, SIGKILL), 0);
  st = ready(engine);
  EXPECT_NE(st["engine"]["pid"], old_standby) << "the standby on the old config.json was released";
  EXPECT_NE(st["last_start"]["path"], "standby") << st.dump();
  const json sb = find_path(st["start_paths"], "standby");
  EXPECT_EQ(sb.value("reason", ""), "unavailable") << st["start_paths"].dump();
  EXPECT_NE(sb.value("detail", "").find("config.json"), std::string::npos) << sb.dump();
  st = parked(old_standby);
  EXPECT_NE(::kill(old_standby, 0), 0) << "the standby on the old config.json still runs";
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// A re-read config (reload without flags, SIGHUP) that changes what the engine starts with besides its
// flags (here engine.env) replaces the standby at once: the next engine runs on the new config.
TEST_F(StandbyTest, AReReadConfigReplacesTheStandby) {
  Options o;
  o.engine_extra = "env = { FR_STANDBY_MARK = \"before\" }\n";
  launch(o);
  ready();
  json st = parked();
  const pid_t old_standby = st["standby"]["pid"];
  {
    std::ifstream in(m_cfg);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const auto at = text.find("\"before\"");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 8, "\"after\"");
    std::ofstream(m_cfg) << text;
  }
  auto r = ctl({"reload"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  st = parked(old_standby);
  EXPECT_NE(::kill(old_standby, 0), 0) << "the standby started from the old config still runs";
  const pid_t standby = st["standby"]["pid"];
  ASSERT_EQ(::kill(st["engine"]["pid"].get<pid_t>(), SIGKILL), 0);
  st = ready(st["engine"]["pid"]);
  EXPECT_EQ(st["engine"]["pid"], standby) << st.dump();
  std::ifstream env("/proc/" + std::to_string(st["engine"]["pid"].get<pid_t>()) + "/environ");
  const std::string environ((std::istreambuf_iterator<char>(env)), {});
  EXPECT_NE(environ.find(std::string("FR_STANDBY_MARK=after") + '\0'), std::string::npos) << "the engine runs on the old config";
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// The leak check after a standby's release compares with what was used before the engine, not with what
// was used at the release (the dead engine's memory not freed yet, the released standby's own context):
// a leak left behind by the engine after a release is still reported.
TEST_F(StandbyTest, TheLeakCheckAfterAReleaseKeepsTheBaselineBeforeTheEngine) {
  launch_on_fake_gpu();
  ready();
  json st = parked();
  const pid_t engine = st["engine"]["pid"];
  used_gb(30);  // the engine's KV cache; it is still being freed when the standby is released
  ASSERT_EQ(::kill(engine, SIGKILL), 0);
  st = ready(engine);
  ASSERT_EQ(st["last_start"]["path"], "standby") << st.dump();
  // The engine now exits for a flag push (the standby on the old flags is not released, so the leak
  // check runs) and leaves 29 GB behind: what was used before it started is 1 GB.
  const pid_t released = st["engine"]["pid"];
  st = parked(released);
  auto r = ctl({"reload", "--add-flags", "--max-model-len 64"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  st = ready(released);
  EXPECT_NE(m_sup->log().find("still used after the engine exited"), std::string::npos)
      << "the leak after the release went unreported: " << m_sup->log();
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// stop-engine with a standby parked: no release follows (the standby is discarded once the engine is
// gone), so the leak check runs as for any exit.
TEST_F(StandbyTest, TheLeakCheckRunsWhenTheEngineIsHeldWithAStandbyParked) {
  launch_on_fake_gpu();
  ready();
  parked();
  used_gb(30);  // what the engine leaves behind: 29 GB beyond what was used before it started
  ASSERT_EQ(ctl({"stop-engine"}).exit_code, 0);
  json st;
  ASSERT_TRUE(m_sup->wait_for([](const json& j) { return j.value("state", "") == "held"; }, 90, &st)) << m_sup->log();
  EXPECT_NE(m_sup->log().find("still used after the engine exited"), std::string::npos)
      << "the leak went unreported: " << m_sup->log();
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// A standby starts while the engine holds its share of the GPU: its own share is allocated only after its
// release, once the engine is gone, so its start warns of no missing free memory.
TEST_F(StandbyTest, AStandbyStartDoesNotWarnThatTheEnginesShareDoesNotFit) {
  launch_on_fake_gpu();
  ready();
  json st = parked();
  used_gb(30);  // the engine's share, allocated: 50 GB free, less than a whole share
  const pid_t standby = st["standby"]["pid"];
  ASSERT_EQ(::kill(standby, SIGKILL), 0);
  st = parked(standby);
  EXPECT_EQ(m_sup->log().find("does not fit in the free"), std::string::npos) << m_sup->log();
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// A standby that closes its end of the gate socket after parking can no longer be released: it is a
// protocol failure at once (stopped, counted, started again), not a parked standby in status until the
// engine dies and its release fails.
TEST_F(StandbyTest, AStandbyThatClosesItsGateWhileParkedIsAFailure) {
  const std::string wrapper = m_dir / "close-gate.sh";
  std::ofstream(wrapper) << "#!/bin/bash\n"
                            "if [ -n \"$FASTRESTART_STANDBY_FD\" ]; then\n"
                            "  printf '{\"op\":\"parked\",\"v\":1,\"level\":\"pre_gpu\",\"pid\":%d}\\n' $$ >&\"$FASTRESTART_STANDBY_FD\"\n"
                            "  eval \"exec $FASTRESTART_STANDBY_FD>&-\"\n"
                            "  exec sleep 1000\n"
                            "fi\n"
                            "exec \"$@\"\n";
  ASSERT_EQ(::chmod(wrapper.c_str(), 0755), 0);
  Options o;
  o.wrapper = wrapper;
  launch(o);
  json st = ready();
  ASSERT_TRUE(m_sup->wait_for([](const json& j) { return j["standby"]["failures"].value("protocol", 0) >= 1; }, 90, &st))
      << m_sup->log();
  EXPECT_NE(st["standby"].value("last_failure", "").find("closed its end of the gate socket while parked"), std::string::npos)
      << st["standby"].dump();
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// An engine that exits 0 on its own (a SIGTERM from someone else) is replaced by the standby too.
TEST_F(StandbyTest, AnEngineThatExitsZeroIsReplacedByTheStandby) {
  launch();
  json st = ready();
  st = parked();
  const pid_t engine = st["engine"]["pid"], standby = st["standby"]["pid"];
  ASSERT_EQ(::kill(engine, SIGTERM), 0);
  st = ready(engine);
  EXPECT_EQ(st["engine"]["pid"], standby) << st.dump();
  EXPECT_EQ(st["last_start"]["path"], "standby");
  EXPECT_NE(st["last_exit"].value("cause", ""), "requested") << st["last_exit"].dump();
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// A push that changes the flags discards the standby: the engine starts on the next path, and a standby
// on the new flags parks once it is ready.
TEST_F(StandbyTest, AFlagPushReplacesTheStandby) {
  launch();
  json st = ready();
  st = parked();
  const pid_t engine = st["engine"]["pid"], old_standby = st["standby"]["pid"];
  std::vector<std::string> flags = st["flags"];
  flags.push_back("--max-model-len");
  flags.push_back("64");
  std::vector<std::string> args{"reload", "--flags"};
  std::string joined;
  for (const auto& f : flags) joined += (joined.empty() ? "" : " ") + f;
  args.push_back(joined);
  auto r = ctl(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  st = ready(engine);
  EXPECT_NE(st["engine"]["pid"], old_standby) << "the standby on the old flags was released";
  EXPECT_EQ(st["last_start"]["path"], "warm") << st.dump();
  EXPECT_EQ(find_path(st["start_paths"], "standby").value("reason", ""), "unavailable") << st["start_paths"].dump();
  EXPECT_EQ(find_path(st["start_paths"], "standby").value("detail", ""), "the standby was started on other flags");
  st = parked(old_standby);
  const pid_t standby = st["standby"]["pid"];
  EXPECT_NE(::kill(old_standby, 0), 0) << "the standby on the old flags still runs";
  std::ifstream cmd("/proc/" + std::to_string(standby) + "/cmdline");
  std::string argv((std::istreambuf_iterator<char>(cmd)), {});
  EXPECT_NE(argv.find(std::string("--max-model-len") + '\0' + "64"), std::string::npos) << "the new standby runs on the old flags";
  // And it is the one released next.
  ASSERT_EQ(::kill(st["engine"]["pid"].get<pid_t>(), SIGKILL), 0);
  st = ready(st["engine"]["pid"]);
  EXPECT_EQ(st["engine"]["pid"], standby);
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// A standby that dies while parked is classified, logged and started again.
TEST_F(StandbyTest, AStandbyThatDiesWhileParkedIsStartedAgain) {
  launch();
  ready();
  json st = parked();
  const pid_t standby = st["standby"]["pid"];
  ASSERT_EQ(::kill(standby, SIGKILL), 0);
  st = parked(standby);
  EXPECT_EQ(st["standby"]["failures"].value("died", 0), 1) << st["standby"].dump();
  EXPECT_NE(st["standby"].value("last_failure", "").find("died while parked"), std::string::npos) << st["standby"].dump();
  EXPECT_EQ(st["restarts"].value("crash", 0), 0) << "the standby's death is not the engine's";
  EXPECT_TRUE(st["standby"]["disabled"].get<std::string>().empty());
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// A standby that parks and dies 0.2 s later, every time: each death is a failure (parking does not end the
// streak), the spawns are spaced by the engine's backoff (restart.backoff_*), and after
// standby.max_failures the path is off with the reason; no standby is spawned after that.
TEST_F(StandbyTest, AStandbyThatKeepsDyingAfterItParksBacksOffAndIsDisabled) {
  Options o;
  o.engine_flags = ", \"--fault-standby\", \"die-parked-after=0.2\"";  // only a parked process dies
  o.standby_extra = "max_failures = 4\n";
  launch(o);
  json st = ready();
  ASSERT_TRUE(m_sup->wait_for([](const json& j) { return j["standby"].value("state", "") == "disabled"; }, 90, &st)) << m_sup->log();
  const json sb = st["standby"];
  EXPECT_EQ(sb.value("spawns", 0), 4) << sb.dump();
  EXPECT_EQ(sb["failures"].value("died", 0), 4) << sb.dump();
  EXPECT_EQ(sb.value("failures_in_row", 0), 4) << sb.dump();
  EXPECT_NE(sb.value("disabled", "").find("4 standbys in a row failed (standby.max_failures 4)"), std::string::npos) << sb.dump();
  EXPECT_NE(sb.value("disabled", "").find("died while parked"), std::string::npos) << sb.dump();
  // The backoff between them doubled from restart.backoff_initial_s (0.05) to backoff_max_s (0.2).
  const std::string log = m_sup->log();
  for (const char* delay : {"starting another in 0.05 s (1 failure(s)", "starting another in 0.10 s (2 failure(s)",
                            "starting another in 0.20 s (3 failure(s)"})
    EXPECT_NE(log.find(delay), std::string::npos) << delay << "\n" << log;
  EXPECT_NE(log.find("standby: disabled: 4 standbys in a row failed"), std::string::npos) << log;
  // Disabled: the engine keeps serving, no standby runs, and status names why.
  EXPECT_EQ(st["state"], "ready");
  EXPECT_EQ(sb.value("pid", -1), 0) << sb.dump();
  EXPECT_EQ(m_sup->status()["standby"].value("spawns", 0), 4) << "a disabled standby path spawned again";
  EXPECT_EQ(st["restarts"].value("crash", 0), 0) << "the standby's deaths are not the engine's";
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// An engine that does not speak the gate protocol never parks: after standby.max_failures of them the path
// is off and says why; the engine is restarted by the next path meanwhile.
TEST_F(StandbyTest, AnEngineThatNeverParksDisablesThePathWithTheReason) {
  Options o;
  o.engine_flags = ", \"--fault-standby\", \"never-park\"";
  o.standby_extra = "park_timeout_s = 3\nmax_failures = 2\n";
  launch(o);
  json st = ready();
  ASSERT_TRUE(m_sup->wait_for([](const json& j) { return j["standby"].value("state", "") == "disabled"; }, 90, &st)) << m_sup->log();
  EXPECT_NE(st["standby"].value("disabled", "").find("standby.max_failures"), std::string::npos) << st["standby"].dump();
  const pid_t engine = st["engine"]["pid"];
  ASSERT_EQ(::kill(engine, SIGKILL), 0);
  st = ready(engine);
  EXPECT_EQ(st["last_start"]["path"], "warm") << st.dump();
  const json sb = find_path(st["start_paths"], "standby");
  EXPECT_EQ(sb.value("reason", ""), "unavailable") << st["start_paths"].dump();
  EXPECT_NE(sb.value("detail", "").find("standbys in a row"), std::string::npos) << sb.dump();
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// A standby found listening on the engine's port before its release is stopped and counted.
TEST_F(StandbyTest, AStandbyListeningOnThePortBeforeItsReleaseIsStopped) {
  Options o;
  o.engine_flags = ", \"--fault-standby\", \"bind-early\"";
  o.standby_extra = "max_failures = 2\n";
  launch(o);
  json st = ready();
  ASSERT_TRUE(m_sup->wait_for([](const json& j) { return j["standby"]["failures"].value("listening", 0) >= 1; }, 90, &st))
      << m_sup->log();
  EXPECT_NE(st["standby"].value("last_failure", "").find("before its release"), std::string::npos) << st["standby"].dump();
  EXPECT_EQ(st["engine"]["pid"], ready()["engine"]["pid"]) << "the engine was disturbed";
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// A standby that dies right after its release is the engine: it is restarted by the next path.
TEST_F(StandbyTest, AStandbyThatDiesAfterItsReleaseRestartsAsTheEngine) {
  Options o;
  o.engine_flags = ", \"--fault-standby\", \"exit-after-release\"";
  launch(o);
  json st = ready();
  st = parked();
  const pid_t engine = st["engine"]["pid"], standby = st["standby"]["pid"];
  ASSERT_EQ(::kill(engine, SIGKILL), 0);
  ASSERT_TRUE(m_sup->wait_for([&](const json& j) {
    return j.value("state", "") == "ready" && j["engine"].value("pid", 0) != engine && j["engine"].value("pid", 0) != standby &&
           j["last_start"].value("pid", 0) == j["engine"].value("pid", 0);
  }, 90, &st)) << m_sup->log();
  EXPECT_EQ(st["last_start"]["path"], "warm") << st.dump();
  EXPECT_EQ(st["restarts"].value("crash", 0), 2) << st["restarts"].dump();
  EXPECT_EQ(st["standby"]["releases"], 1);
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// SIGTERM with a standby parked: the engine's and the standby's groups are gone before the daemon stops.
TEST_F(StandbyTest, TeardownStopsTheStandbyBeforeTheDaemons) {
  launch();
  ready();
  json st = parked();
  const pid_t standby = st["standby"]["pid"], daemon = st["daemons"][0]["pid"];
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
  const std::string log = m_sup->log();
  const auto standby_gone = log.find("standby pid " + std::to_string(standby) + " stopped");
  const auto daemon_gone = log.find("weight daemon pid " + std::to_string(daemon) + " stopped");
  ASSERT_NE(standby_gone, std::string::npos) << log;
  ASSERT_NE(daemon_gone, std::string::npos) << log;
  EXPECT_LT(standby_gone, daemon_gone) << log;
  EXPECT_NE(::kill(standby, 0), 0);
}

// A standby in a memory cgroup with the engine: a kernel OOM kill of the engine releases it.
TEST_F(StandbyTest, AnOomKilledEngineIsReplacedByTheStandby) {
  test::MemoryCgroup cgroup("fastrestart-standby-test-" + std::to_string(::getpid()), 384 << 20);
  if (cgroup.dir().empty()) GTEST_SKIP() << cgroup.skip_reason();
  const std::string& dir = cgroup.dir();
  {
    Options o;
    // Slow enough for the standby to park first (it starts once the engine is ready).
    o.engine_flags = ", \"--fault-grow-memory\", \"--fault-grow-memory-rate\", \"64\"";
    o.cgroup = dir;
    launch(o);
    json st;
    ASSERT_TRUE(m_sup->wait_for([](const json& j) {
      return j["restarts"].value("kernel_oom", 0) >= 1 && j["standby"].value("releases", 0) >= 1;
    }, 120, &st)) << m_sup->log();
    const std::string log = m_sup->log();
    const auto oom = log.find("kernel_oom");
    const auto released = log.find("standby: released pid");
    ASSERT_NE(oom, std::string::npos) << log;
    ASSERT_NE(released, std::string::npos) << log;
    EXPECT_LT(oom, released) << "the first release must follow the OOM kill";
    EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
  }
}

// A warmed standby's reserve is what its own processes hold on the GPU (NVML's per-process figures, here
// the fake's "processes"), not the growth of used memory while it warmed (another process took 8 GB
// meanwhile), and it is current: the status after the standby grew shows the new figure, per GPU, and the
// engine's share follows it.
TEST_F(StandbyTest, AWarmedStandbysReserveIsItsOwnCurrentMemoryOnEachGpu) {
  launch_on_fake_gpu("warmed");
  ready();
  json st = parked();
  const int64_t standby = st["standby"]["pid"];
  auto fake = [&](uint64_t standby_bytes) {
    std::ofstream(m_dir / "nvml.json") << json{{"0", {{"total", 80000000000ULL}, {"used", 12000000000ULL},
                                                      {"processes", {{{"pid", standby}, {"used", standby_bytes}},
                                                                     {{"pid", 1}, {"used", 8000000000ULL}}}}}}}.dump();
  };
  fake(3000000000ULL);
  ASSERT_TRUE(m_sup->wait_for([](const json& j) { return j["memory"][0].value("standby_reserve_bytes", 0ULL) == 3000000000ULL; }, 30, &st))
      << st.dump();
  fake(5000000000ULL);  // it grew while parked (a flag push with larger CUDA graphs would do the same)
  ASSERT_TRUE(m_sup->wait_for([](const json& j) { return j["memory"][0].value("standby_reserve_bytes", 0ULL) == 5000000000ULL; }, 30, &st))
      << st.dump();
  EXPECT_DOUBLE_EQ(st["memory"][0]["engine_share"].get<double>(), std::floor((0.9 - 5e9 / 80e9) * 10000) / 10000) << st.dump();
  const std::string metrics = test::http_get(m_http, "/metrics").body;
  EXPECT_NE(metrics.find("fastrestart_gpu_standby_reserve_bytes{gpu=\"0\"} 5000000000"), std::string::npos) << metrics;
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// A reserve that leaves the engine less than memory.min_share of the GPU (here more than the whole budget:
// the share would be negative) refuses the start with the figures, in status and in the log.
TEST_F(StandbyTest, AShareBelowTheFloorRefusesTheEngineWithTheFigures) {
  launch_on_fake_gpu("warmed", "reserve_mib = 76000\n");
  json st;
  ASSERT_TRUE(m_sup->wait_for([](const json& j) { return j["engine_share_refused"].is_string(); }, 60, &st))
      << m_sup->log();
  const std::string why = st["engine_share_refused"];
  EXPECT_NE(why.find("GPU 0: share -0.0962 is below memory.min_share 0.0500 (total 80.0 GB, budget 72.0 GB"), std::string::npos) << why;
  EXPECT_NE(why.find("standby reserve 79.7 GB"), std::string::npos) << why;
  EXPECT_NE(m_sup->log().find("memory: no engine is started: GPU 0"), std::string::npos) << m_sup->log();
  EXPECT_TRUE(st["engine"].is_null() || !st["engine"].value("running", false)) << st.dump();
  m_sup->stop(SIGTERM);  // it may have given up already (every start is refused: a crash loop)
}

}  // namespace
}  // namespace fr
