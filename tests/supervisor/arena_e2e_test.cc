// KV arenas under fastrestartd, end to end (docs/supervisor.md, "KV arenas"): the real fastrestartd and its
// real fastrestart-weightd on the host backend, and the tiny engine leasing an arena (--kv-arena-bytes).
// The daemon's arena (name, exact bytes, holder, leases, generation) shows in status and /metrics; the
// engine's own word on it (its fastrestart-arena: line) shows as arena_outcome, a lease and a fallback alike.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "support/fastrestartd_config.h"
#include "support/harness.h"
#include "support/supervised.h"

namespace fr {
namespace {

using nlohmann::json;

// Not a multiple of the page: engine_loader leases its range, rounded up to the page, and every figure
// (the daemon's, the engine's line, status, /metrics) must be exactly that.
constexpr uint64_t kArenaBytes = 3000001;

uint64_t page_rounded(uint64_t n) {
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

class ArenaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", m_dir / "model", "--size", "4M"}).exit_code, 0);
    m_port = test::free_port();
    m_http = test::free_port();
    const std::string run = m_dir / "run";
    test::FastrestartdConfig c(m_dir.path());
    c.tiny_engine({.binary = FR_TINYENGINE_BIN, .model = m_dir / "model", .port = m_port,
                   .flags = {"--load-format", "fastrestart", "--shutdown-grace", "2", "--kv-arena-bytes",
                             std::to_string(kArenaBytes), "--kv-arena-wait", "0.5"}})
        .number("engine", "stop_grace_s", 5)
        .host_weights(m_dir / "model", run)
        .text("readiness", "model", "t").number("readiness", "poll_interval_s", 0.05).number("readiness", "check_interval_s", 0.3)
        .number("restart", "backoff_initial_s", 0.05).number("restart", "backoff_max_s", 0.2).number("restart", "crash_loop_limit", 50)
        .http(m_http);
    m_sup = test::start_fastrestartd(FR_FASTRESTARTD_BIN, c);
  }
  void TearDown() override {
    if (m_holder > 0) {
      ::kill(m_holder, SIGKILL);
      ::waitpid(m_holder, nullptr, 0);
    }
  }

  // The daemon's arena "kv" in a status, or null.
  static json arena(const json& st) {
    for (const auto& d : st.value("daemons", json::array()))
      for (const auto& a : d.value("arenas", json::array()))
        if (a.value("name", "") == "kv") return a;
    return nullptr;
  }
  static int64_t holder(const json& st) {
    const json a = arena(st);
    return a.is_object() && a["holder_pid"].is_number() ? a["holder_pid"].get<int64_t>() : 0;
  }
  bool ctl(const std::string& op) {
    auto r = m_sup->request({{"op", op}});
    return r.ok() && r->value("ok", false);
  }
  std::string metrics() { return test::http_get(m_http, "/metrics").body; }
  static bool has(const std::string& text, const std::string& line) { return text.find("\n" + line + "\n") != std::string::npos; }

  test::TempDir m_dir;
  uint16_t m_port = 0, m_http = 0;
  std::unique_ptr<test::Supervised> m_sup;
  pid_t m_holder = -1;
};

// A lease, a fallback while another process holds the arena, and a lease again once that process is gone:
// each engine's word in status, the daemon's record of the arena (exact bytes, holder, leases, generation)
// in status and /metrics.
TEST_F(ArenaTest, LeasesAndAFallbackShowInStatusAndMetrics) {
  json st;
  ASSERT_TRUE(m_sup->wait_ready(&st)) << m_sup->log();
  const int64_t first = st["engine"]["pid"].get<int64_t>();
  // The daemon's status is polled every 2 s: the arena shows once a poll saw the lease.
  ASSERT_TRUE(m_sup->wait_for([&](const json& s) { return holder(s) == first; }, 30, &st)) << st.dump(1);
  json a = arena(st);
  EXPECT_EQ(a["bytes"], page_rounded(kArenaBytes));
  EXPECT_EQ(a["pool_bytes"], page_rounded(kArenaBytes));
  EXPECT_EQ(a["leases"], 1);
  EXPECT_EQ(a["generation"], 1);
  EXPECT_TRUE(a["waited_s"].is_null());  // nobody held it before
  const json& daemon = st["daemons"][0];
  EXPECT_EQ(daemon["arena_bytes"], page_rounded(kArenaBytes));
  const std::string gpu = daemon["gpu"].get<std::string>();
  ASSERT_TRUE(st["arena_outcome"].is_object()) << st.dump(1);
  EXPECT_EQ(st["arena_outcome"]["outcome"], "leased");
  EXPECT_EQ(st["arena_outcome"]["pid"], first);
  EXPECT_EQ(st["arena_outcome"]["name"], "kv");
  EXPECT_EQ(st["arena_outcome"]["bytes"], page_rounded(kArenaBytes));
  EXPECT_EQ(st["arena_outcome"]["generation"], 1);
  std::string m = metrics();
  const std::string labels = "{gpu=\"" + gpu + "\",name=\"kv\"}";
  EXPECT_TRUE(has(m, "fastrestart_arena_bytes" + labels + " " + std::to_string(page_rounded(kArenaBytes)))) << m;
  EXPECT_TRUE(has(m, "fastrestart_arena_leases_total" + labels + " 1")) << m;
  EXPECT_TRUE(has(m, "fastrestart_arena_generation" + labels + " 1")) << m;
  EXPECT_TRUE(has(m, "fastrestart_arena_held" + labels + " 1")) << m;
  EXPECT_TRUE(has(m, "fastrestart_engine_arena_outcome{outcome=\"leased\"} 1")) << m;
  const auto text = test::run({FR_FASTRESTARTCTL_BIN, "--socket", m_dir / "ctl/t.ctl", "status"});
  EXPECT_NE(text.output.find("kv " + std::to_string(page_rounded(kArenaBytes)) + " bytes"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("pid " + std::to_string(first) + " leased kv, " + std::to_string(page_rounded(kArenaBytes)) + " bytes, generation 1"),
            std::string::npos) << text.output;

  // The engine is stopped: the arena outlives it, unheld, and status keeps that engine's word.
  ASSERT_TRUE(ctl("stop-engine")) << m_sup->log();
  ASSERT_TRUE(m_sup->wait_for([](const json& s) { return s.value("state", "") == "held" && arena(s).is_object() && holder(s) == 0; }, 30, &st))
      << st.dump(1);
  EXPECT_EQ(arena(st)["pool_bytes"], page_rounded(kArenaBytes));
  EXPECT_EQ(st["arena_outcome"]["pid"], first);

  // Another process takes the arena (a tiny engine outside fastrestartd), so the next engine's lease runs
  // out of its 0.5 s: it falls back, says why, and serves.
  const uint16_t other = test::free_port();
  m_holder = test::spawn_logged({FR_TINYENGINE_BIN, "serve", m_dir / "model", "--port", std::to_string(other),
                                 "--load-format", "disk", "--kv-arena-bytes", std::to_string(kArenaBytes),
                                 "--fastrestart-socket-dir", m_dir / "run", "--no-snapshot-exchange"},
                                m_dir / "holder.log");
  ASSERT_TRUE(m_sup->wait_for([&](const json& s) { return holder(s) == m_holder; }, 30, &st)) << st.dump(1);
  EXPECT_EQ(arena(st)["generation"], 2);
  ASSERT_TRUE(ctl("start-engine")) << m_sup->log();
  ASSERT_TRUE(m_sup->wait_ready(&st, static_cast<pid_t>(first))) << m_sup->log();
  const int64_t second = st["engine"]["pid"].get<int64_t>();
  ASSERT_TRUE(m_sup->wait_for([&](const json& s) { return s["arena_outcome"].is_object() && s["arena_outcome"]["pid"] == second; }, 30, &st))
      << st.dump(1);
  EXPECT_EQ(st["arena_outcome"]["outcome"], "fallback");
  const std::string reason = st["arena_outcome"].value("reason", "");
  EXPECT_NE(reason.find("still leased to pid " + std::to_string(m_holder)), std::string::npos) << reason;
  EXPECT_FALSE(st["arena_outcome"].contains("generation"));
  m = metrics();
  EXPECT_TRUE(has(m, "fastrestart_engine_arena_outcome{outcome=\"fallback\"} 1")) << m;
  EXPECT_TRUE(has(m, "fastrestart_arena_leases_total" + labels + " 2")) << m;

  // The holder is killed; the next engine (a restart) leases the same arena, generation 3, and says so.
  ::kill(m_holder, SIGKILL);
  ::waitpid(m_holder, nullptr, 0);
  const pid_t gone = m_holder;
  m_holder = -1;
  ASSERT_TRUE(ctl("restart")) << m_sup->log();
  ASSERT_TRUE(m_sup->wait_for([&](const json& s) {
    return s["arena_outcome"].is_object() && s["arena_outcome"]["pid"] != second && s["arena_outcome"]["outcome"] == "leased";
  }, 60, &st)) << st.dump(1) << m_sup->log();
  EXPECT_EQ(st["arena_outcome"]["generation"], 3);
  EXPECT_EQ(st["arena_outcome"]["bytes"], page_rounded(kArenaBytes));
  const int64_t third = st["arena_outcome"]["pid"].get<int64_t>();
  ASSERT_TRUE(m_sup->wait_for([&](const json& s) { return holder(s) == third; }, 30, &st)) << st.dump(1);
  a = arena(st);
  EXPECT_EQ(a["leases"], 3);
  EXPECT_EQ(a["generation"], 3);
  EXPECT_EQ(a["pool_bytes"], page_rounded(kArenaBytes));  // the same arena: not made again
  EXPECT_NE(holder(st), gone);
  m = metrics();
  EXPECT_TRUE(has(m, "fastrestart_arena_leases_total" + labels + " 3")) << m;
  EXPECT_TRUE(has(m, "fastrestart_engine_arena_outcome{outcome=\"leased\"} 1")) << m;
}

}  // namespace
}  // namespace fr
