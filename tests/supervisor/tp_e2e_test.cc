// A tensor-parallel engine under fastrestartd, end to end (docs/supervisor.md, "Tensor parallel"): the
// real fastrestartd with gpus = ["0", "1"] on the host backend (one weight daemon per listed GPU, each a
// real fastrestart-weightd), the tiny engine at --tensor-parallel-size 2 (two processes, each rank's
// shard in its own daemon). A crash of either rank restarts the engine as a whole, every rank attaches its
// shard, a rank that misses makes every rank load from disk, and no daemon stops before the last rank.
#include <signal.h>
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

class TpTest : public ::testing::Test {
 protected:
  void launch(const std::string& engine_flags = "", const std::string& extra = "") {
    ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", m_dir / "model", "--size", "4M"}).exit_code, 0);
    m_port = test::free_port();
    m_http = test::free_port();
    const std::string run = m_dir / "run";
    test::FastrestartdConfig c(m_dir.path());
    c.words("", "gpus", {"0", "1"})
        .tiny_engine({.binary = FR_TINYENGINE_BIN, .model = m_dir / "model", .port = m_port,
                      .flags = {"--tensor-parallel-size", "2", "--tp-timeout", "1", "--load-format", "fastrestart",
                                "--shutdown-grace", "2"},
                      .more_flags = engine_flags})
        .number("engine", "stop_grace_s", 5)
        .host_weights(m_dir / "model", run)
        .text("readiness", "model", "t").number("readiness", "poll_interval_s", 0.05).number("readiness", "check_interval_s", 0.3)
        .number("restart", "backoff_initial_s", 0.05).number("restart", "backoff_max_s", 0.2)
        .number("restart", "crash_loop_limit", 50).number("restart", "warm_failures_before_cold", 0).lines("restart", extra)
        .http(m_http);
    m_cfg = c.write();
    m_sup = test::start_fastrestartd(FR_FASTRESTARTD_BIN, c);
  }
  // READY with an engine other than `not_pid`; returns the status then.
  json ready(pid_t not_pid = 0) { return m_sup->expect_ready(not_pid); }
  json engine_stats() { return json::parse(test::http_get(m_port, "/stats").body, nullptr, false); }
  // The engine's ranks as its /stats lists them (rank 0 first).
  json ranks() {
    json j = engine_stats();
    return j.is_object() && j["tensor_parallel"].contains("ranks") ? j["tensor_parallel"]["ranks"] : json::array();
  }
  json completion() {
    auto a = test::http_post(m_port, "/v1/completions",
                             {{"model", "t"}, {"prompt", "The capital of France is"}, {"max_tokens", 6}, {"logprobs", 1}});
    auto j = json::parse(a.body, nullptr, false);
    return j.is_object() && j.contains("choices") ? j["choices"][0] : json();
  }
  static bool alive(pid_t pid) { return pid > 0 && ::kill(pid, 0) == 0; }
  // Processes whose command line is a rank >= 1 of this test's model (rank 0 starts them with --tp-rank).
  int rank_processes() {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      std::ifstream f(e.path() / "cmdline");
      std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      n += cmd.find(std::string(m_dir / "model")) != std::string::npos && cmd.find(std::string("--tp-rank\0", 10)) != std::string::npos;
    }
    return n;
  }
  // A daemon's pool holds the shard, rounded up to its pages and tensor alignment.
  static bool holds(const json& daemon, const json& rank) {
    const uint64_t held = daemon.value("held_bytes", 0ull), shard = rank.value("weight_bytes", 0ull);
    return shard > 0 && held >= shard && held <= shard + shard / 10 + (1u << 20);
  }
  static json daemon_of(const json& st, const std::string& gpu) {
    for (const auto& d : st["daemons"])
      if (d.value("gpu", "") == gpu) return d;
    return json::object();
  }

  test::TempDir m_dir;
  uint16_t m_port = 0, m_http = 0;
  std::string m_cfg;
  std::unique_ptr<test::Supervised> m_sup;
};

// One daemon per listed GPU, each holding its rank's shard after the first (cold) start; a kill -9 of
// either rank restarts the engine as a whole, and every restart attaches both shards and answers with the
// same tokens and log-probabilities as the first start.
TEST_F(TpTest, EitherRankKilledRestartsTheEngineAndEveryRankAttachesItsShard) {
  launch();
  json st = ready();
  json first = completion();
  ASSERT_TRUE(first.is_object()) << m_sup->log();
  json r = ranks();
  ASSERT_EQ(r.size(), 2u) << engine_stats().dump();
  EXPECT_EQ(r[0]["path"], "fallback");
  EXPECT_EQ(r[1]["path"], "fallback");
  EXPECT_EQ(r[0]["device"], "host:0");
  EXPECT_EQ(r[1]["device"], "host:1");
  // Each daemon holds exactly its rank's shard.
  ASSERT_TRUE(m_sup->wait_for([&](const json& j) {
    return holds(daemon_of(j, "0"), r[0]) && holds(daemon_of(j, "1"), r[1]);
  }, 30, &st)) << st.dump() << "\n" << r.dump();
  EXPECT_NE(daemon_of(st, "0").value("socket", ""), daemon_of(st, "1").value("socket", ""));
  EXPECT_LT(r[1].value("weight_bytes", 0), r[0].value("weight_bytes", 0));

  for (int round = 0; round < 4; ++round) {
    const pid_t engine = st["engine"]["pid"];
    const pid_t rank1 = r[1]["pid"];
    const pid_t victim = round % 2 == 0 ? rank1 : engine;  // rank 1 alone, then rank 0 alone
    ASSERT_EQ(::kill(victim, SIGKILL), 0);
    st = ready(engine);
    EXPECT_FALSE(alive(rank1)) << "the old engine's rank 1 outlived the restart";
    EXPECT_FALSE(alive(engine));
    r = ranks();
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0]["path"], "attach") << r.dump();
    EXPECT_EQ(r[1]["path"], "attach") << r.dump();
    EXPECT_EQ(completion(), first) << "round " << round;
    EXPECT_EQ(st["last_start"]["path"], "warm") << st.dump();
  }
  EXPECT_EQ(st["restarts"].value("crash", 0), 4) << st.dump();
  const std::string log = m_sup->log();
  EXPECT_NE(log.find("tensor-parallel rank 1 (pid"), std::string::npos) << log;
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// The daemon of GPU 1 dies: fastrestartd starts it again, empty. At the next restart rank 0 still finds
// its shard but rank 1 misses, so both ranks load from disk (never one attached and one from disk), rank 1
// publishes again, and the restart after that attaches both.
TEST_F(TpTest, ARankThatMissesMakesEveryRankLoadFromDisk) {
  launch();
  json st = ready();
  json first = completion();
  json r = ranks();
  ASSERT_TRUE(m_sup->wait_for([&](const json& j) { return daemon_of(j, "1").value("held_bytes", 0) > 0; }, 30, &st));
  const pid_t daemon1 = daemon_of(st, "1")["pid"];
  ASSERT_EQ(::kill(daemon1, SIGKILL), 0);
  ASSERT_TRUE(m_sup->wait_for([&](const json& j) {
    const json d = daemon_of(j, "1");
    return d.value("pid", 0) != daemon1 && d.value("state", "") == "ready";
  }, 60, &st)) << m_sup->log();
  EXPECT_EQ(daemon_of(st, "1").value("held_bytes", 1), 0);
  EXPECT_GT(daemon_of(st, "0").value("held_bytes", 0), 0);

  pid_t engine = st["engine"]["pid"];
  ASSERT_EQ(::kill(engine, SIGKILL), 0);
  st = ready(engine);
  r = ranks();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0]["path"], "fallback") << r.dump();
  EXPECT_EQ(r[1]["path"], "fallback") << r.dump();
  EXPECT_NE(r[0].value("reason", "").find("rank 1 missed"), std::string::npos) << r.dump();
  EXPECT_EQ(completion(), first);
  ASSERT_TRUE(m_sup->wait_for([&](const json& j) { return holds(daemon_of(j, "1"), r[1]); }, 30, &st)) << st.dump();

  engine = st["engine"]["pid"];
  ASSERT_EQ(::kill(engine, SIGKILL), 0);
  st = ready(engine);
  r = ranks();
  EXPECT_EQ(r[0]["path"], "attach") << r.dump();
  EXPECT_EQ(r[1]["path"], "attach") << r.dump();
  EXPECT_EQ(completion(), first);
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// A rank that stops answering: rank 0's /health fails after --tp-timeout, fastrestartd classifies the
// engine hung and kills its whole group, the hung rank included.
TEST_F(TpTest, ARankThatHangsMakesTheEngineHungAndItsWholeGroupIsKilled) {
  launch(", \"--fault-tp-hang-rank\", \"1\"", "");
  // The rank hangs at its second ping: the first /health after ready passes, a later one does not.
  json st;
  ASSERT_TRUE(m_sup->wait_for([&](const json& j) {
    return j["last_exit"].is_object() && j["last_exit"].value("cause", "") == "hung";
  }, 90, &st)) << m_sup->log();
  const std::string log = m_sup->log();
  EXPECT_NE(log.find("rank 1 did not answer"), std::string::npos) << log;
  EXPECT_NE(log.find("stops answering"), std::string::npos) << log;
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
  // No rank of any engine is left once fastrestartd is gone.
  EXPECT_EQ(rank_processes(), 0) << "a rank of this test's engines outlived fastrestartd";
}

// SIGTERM: rank 0 drains and exits, rank 1 outlives it by a second; the daemons are stopped only after the
// engine's last process is gone (a rank may still map their memory).
TEST_F(TpTest, TheDaemonsOutliveTheLastRankAtStop) {
  launch(", \"--fault-tp-linger\", \"1.5\"");
  ready();
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
  const std::string log = m_sup->log();
  EXPECT_NE(log.find("at its exit its weight daemon is still running"), std::string::npos) << log;
  EXPECT_EQ(log.find("at its exit its weight daemon is gone"), std::string::npos) << log;
}

// The supervisor gives each rank its device and memory share (one per listed GPU, in order).
TEST_F(TpTest, EachRankGetsTheDeviceOfItsGpu) {
  launch();
  ready();
  const json r = ranks();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0]["device"], "host:0");
  EXPECT_EQ(r[1]["device"], "host:1");
  const std::string metrics = test::http_get(m_http, "/metrics").body;
  EXPECT_NE(metrics.find("fastrestart_daemon_up{gpu=\"0\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("fastrestart_daemon_up{gpu=\"1\"} 1"), std::string::npos) << metrics;
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// Two ranks on two fake GPUs (FASTRESTART_FAKE_NVML), no weight daemons, a warmed standby first.
test::FastrestartdConfig tp_memory_config(const test::TempDir& dir, uint16_t port, uint16_t http) {
  test::FastrestartdConfig c(dir.path());
  c.words("", "gpus", {"0", "1"})
      .tiny_engine({.binary = FR_TINYENGINE_BIN, .model = dir / "model", .port = port, .flags = {"--tensor-parallel-size", "2"}})
      .text("weights", "mode", "off")
      .number("memory", "utilization", 0.9).number("memory", "leak_tolerance_mib", 100000).number("memory", "settle_timeout_s", 1)
      .text("standby", "level", "warmed")
      .text("readiness", "model", "t").number("readiness", "poll_interval_s", 0.05)
      .words("restart", "start", {"standby", "cold"})
      .http(http);
  return c;
}

// Each GPU's share is computed on that GPU: two fake GPUs of 80 and 40 GB (FASTRESTART_FAKE_NVML), a
// warmed standby's 4096 MiB reserve set aside on each, so 0.9 - 4096 MiB / total differs per GPU. Each
// rank is given its own GPU's share, status and /metrics show both, and --gpu-memory-utilization is the
// smaller one (for engines that take one number for all their ranks).
TEST(TpMemory, EachRankIsGivenTheShareOfItsOwnGpu) {
  test::TempDir dir;
  ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", dir / "model", "--size", "4M"}).exit_code, 0);
  std::ofstream(dir / "nvml.json") << "{\"0\": {\"total\": 80000000000, \"used\": 1000000000},"
                                      " \"1\": {\"total\": 40000000000, \"used\": 1000000000}}";
  const uint16_t port = test::free_port(), http = test::free_port();
  const auto sup_owner = test::start_fastrestartd(FR_FASTRESTARTD_BIN, tp_memory_config(dir, port, http).number("standby", "reserve_mib", 4096), "d.log", dir / "nvml.json");
  test::Supervised& sup = *sup_owner;
  json st;
  ASSERT_TRUE(sup.wait_for([](const json& j) { return j.value("state", "") == "ready"; }, 90, &st)) << sup.log();
  const double reserve = 4096.0 * 1048576;
  const double want0 = std::floor((0.9 - reserve / 80e9) * 10000) / 10000, want1 = std::floor((0.9 - reserve / 40e9) * 10000) / 10000;
  ASSERT_EQ(st["memory"].size(), 2u) << st.dump();
  EXPECT_NEAR(st["memory"][0].value("engine_share", 0.0), want0, 1e-9) << st["memory"].dump();
  EXPECT_NEAR(st["memory"][1].value("engine_share", 0.0), want1, 1e-9) << st["memory"].dump();
  const json stats = json::parse(test::http_get(port, "/stats").body, nullptr, false);
  ASSERT_TRUE(stats.is_object());
  const json ranks = stats["tensor_parallel"]["ranks"];
  ASSERT_EQ(ranks.size(), 2u) << stats.dump();
  EXPECT_NEAR(ranks[0].value("memory_utilization", 0.0), want0, 1e-6) << ranks.dump();
  EXPECT_NEAR(ranks[1].value("memory_utilization", 0.0), want1, 1e-6) << ranks.dump();
  EXPECT_NEAR(stats.value("gpu_memory_utilization", 0.0), want1, 1e-6) << "the one flag is the smaller share";
  const std::string metrics = test::http_get(http, "/metrics").body;
  EXPECT_NE(metrics.find("fastrestart_gpu_engine_memory_share_ratio{gpu=\"1\"}"), std::string::npos) << metrics;
  EXPECT_EQ(sup.stop(SIGTERM), 0) << sup.log();
}

// A warmed standby of a TP=2 engine holds memory on both GPUs, one rank on each: each GPU's share loses
// what the standby's processes hold on that GPU (the fake's per-process figures), never the sum of both.
TEST(TpMemory, AMeasuredStandbyReserveIsSubtractedPerGpu) {
  test::TempDir dir;
  ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", dir / "model", "--size", "4M"}).exit_code, 0);
  std::ofstream(dir / "nvml.json") << "{\"0\": {\"total\": 80000000000, \"used\": 1000000000},"
                                      " \"1\": {\"total\": 40000000000, \"used\": 1000000000}}";
  const uint16_t port = test::free_port(), http = test::free_port();
  const auto sup_owner = test::start_fastrestartd(FR_FASTRESTARTD_BIN, tp_memory_config(dir, port, http), "d.log", dir / "nvml.json");
  test::Supervised& sup = *sup_owner;
  json st;
  ASSERT_TRUE(sup.wait_for([](const json& j) { return j["standby"].is_object() && j["standby"].value("state", "") == "parked"; }, 90, &st))
      << sup.log();
  const int64_t standby = st["standby"]["pid"];
  auto gpu = [&](uint64_t total, uint64_t standby_bytes) {
    return json{{"total", total}, {"used", 20000000000ULL}, {"processes", {{{"pid", standby}, {"used", standby_bytes}}}}};
  };
  std::ofstream(dir / "nvml.json") << json{{"0", gpu(80000000000ULL, 3000000000ULL)}, {"1", gpu(40000000000ULL, 2000000000ULL)}}.dump();
  ASSERT_TRUE(sup.wait_for([](const json& j) {
    return j["memory"].size() == 2 && j["memory"][0].value("standby_reserve_bytes", 0ULL) == 3000000000ULL &&
           j["memory"][1].value("standby_reserve_bytes", 0ULL) == 2000000000ULL;
  }, 30, &st)) << st["memory"].dump();
  EXPECT_DOUBLE_EQ(st["memory"][0]["engine_share"].get<double>(), std::floor((0.9 - 3e9 / 80e9) * 10000) / 10000) << st["memory"].dump();
  EXPECT_DOUBLE_EQ(st["memory"][1]["engine_share"].get<double>(), std::floor((0.9 - 2e9 / 40e9) * 10000) / 10000) << st["memory"].dump();
  EXPECT_EQ(st["standby"]["gpu_bytes"], 5000000000ULL) << st["standby"].dump();
  EXPECT_EQ(sup.stop(SIGTERM), 0) << sup.log();
}

}  // namespace
}  // namespace fr
