// The engine's KV cache survival in fastrestartd's status and /metrics, end to end (docs/kv-survival.md,
// "In fastrestartd's status"): the real fastrestartd and its real fastrestart-weightd on the host backend;
// the tiny engine keeps its prefix cache on a host KV arena. Requests with shared prefixes fill it; the
// engine is killed with SIGKILL; fastrestartd starts the next one, which recovers the index from the arena
// and says so (its fastrestart-kv: line); the same prompts then hit, as its counters file says. status,
// `fastrestartctl status` and /metrics all show it.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/fastrestartd_config.h"
#include "support/harness.h"
#include "support/supervised.h"

namespace fr {
namespace {

using nlohmann::json;

class KvStatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", m_dir / "model", "--size", "4M"}).exit_code, 0);
    m_port = test::free_port();
    m_http = test::free_port();
    test::FastrestartdConfig c(m_dir.path());
    c.tiny_engine({.binary = FR_TINYENGINE_BIN, .model = m_dir / "model", .port = m_port,
                   .flags = {"--load-format", "fastrestart", "--shutdown-grace", "2", "--kv-arena-bytes", "8388608",
                             "--kv-arena-wait", "10", "--block-size", "4"}})
        .number("engine", "stop_grace_s", 5)
        .host_weights(m_dir / "model", m_dir / "run")
        .text("readiness", "model", "t").number("readiness", "poll_interval_s", 0.05).number("readiness", "check_interval_s", 0.3)
        .number("restart", "backoff_initial_s", 0.05).number("restart", "backoff_max_s", 0.2).number("restart", "crash_loop_limit", 50)
        .http(m_http);
    m_sup = test::start_fastrestartd(FR_FASTRESTARTD_BIN, c);
  }

  // Prompts over 4 shared prefixes of several 4-token blocks each; each asked once.
  void ask_all() {
    for (int s = 0; s < 4; ++s)
      for (int q = 0; q < 3; ++q) {
        const std::string prompt = "System " + std::to_string(s) + ": answer in few words, be kind and precise. Question " +
                                   std::to_string(q) + "?";
        auto r = test::http_post(m_port, "/v1/completions", {{"model", "t"}, {"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}}, 30);
        ASSERT_EQ(r.status, 200) << r.body;
      }
  }
  static bool kv_of(const json& s, int64_t pid) { return s["kv_cache"].is_object() && s["kv_cache"]["pid"] == pid; }
  static uint64_t hits(const json& s) { return s["kv_cache"]["prefix"]["hit_tokens"].get<uint64_t>(); }
  std::string metrics() { return test::http_get(m_http, "/metrics").body; }
  // The value of a sample line "name value" in the exposition, or -1.
  static double sample(const std::string& text, const std::string& name) {
    const size_t at = text.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
  }

  test::TempDir m_dir;
  uint16_t m_port = 0, m_http = 0;
  std::unique_ptr<test::Supervised> m_sup;
};

TEST_F(KvStatusTest, RecoveredBlocksAndPrefixHitsAfterKillNineShowInStatusCtlAndMetrics) {
  json st;
  ASSERT_TRUE(m_sup->wait_ready(&st)) << m_sup->log();
  const int64_t first = st["engine"]["pid"].get<int64_t>();
  ASSERT_TRUE(m_sup->wait_for([&](const json& s) { return kv_of(s, first); }, 30, &st)) << st.dump(1) << m_sup->log();
  EXPECT_EQ(st["kv_cache"]["location"], "arena") << st["kv_cache"].dump();
  EXPECT_EQ(st["kv_cache"]["header"], "empty");  // a new arena
  EXPECT_EQ(st["kv_cache"]["recovered"], 0);
  EXPECT_EQ(st["kv_cache"]["block_tokens"], 4);
  EXPECT_GT(st["kv_cache"]["blocks"].get<uint64_t>(), 0u);

  // Shared prefixes: the second and third prompt of each prefix hit the first one's blocks.
  ask_all();
  ASSERT_TRUE(m_sup->wait_for([&](const json& s) { return kv_of(s, first) && s["kv_cache"]["counters"] == "file" && hits(s) > 0; },
                              30, &st)) << st.dump(1);
  EXPECT_EQ(st["kv_cache"]["error"], "");

  // kill -9; fastrestartd starts the next engine, which recovers the index from the arena.
  ASSERT_EQ(::kill(static_cast<pid_t>(first), SIGKILL), 0);
  ASSERT_TRUE(m_sup->wait_ready(&st, static_cast<pid_t>(first))) << m_sup->log();
  const int64_t second = st["engine"]["pid"].get<int64_t>();
  ASSERT_TRUE(m_sup->wait_for([&](const json& s) { return kv_of(s, second); }, 30, &st)) << st.dump(1) << m_sup->log();
  const json kv = st["kv_cache"];
  EXPECT_EQ(kv["header"], "valid") << kv.dump();
  const uint64_t recovered = kv["recovered"].get<uint64_t>();
  EXPECT_GT(recovered, 0u) << kv.dump();
  // A kill between requests interrupted no write: nothing torn, nothing failing its checksum or hash.
  for (const char* why : {"torn", "checksum", "hash"}) EXPECT_FALSE(kv["dropped_by"].contains(why)) << kv.dump();

  // The same prompts again: served from the recovered prefixes, as the new engine's counters file says
  // (readiness and health checks may ask too: at least these 12 requests).
  const uint64_t before = kv["prefix"]["requests"].get<uint64_t>();
  ask_all();
  ASSERT_TRUE(m_sup->wait_for([&](const json& s) {
    return kv_of(s, second) && s["kv_cache"]["counters"] == "file" && s["kv_cache"]["prefix"]["requests"].get<uint64_t>() >= before + 12;
  }, 30, &st)) << st.dump(1);
  const json prefix = st["kv_cache"]["prefix"];
  EXPECT_GT(prefix["hit_tokens"].get<uint64_t>(), 0u) << prefix.dump();
  ASSERT_TRUE(prefix["hit_rate"].is_number()) << prefix.dump();
  const double rate = prefix["hit_rate"].get<double>();
  EXPECT_GT(rate, 0.0);
  EXPECT_LE(rate, 1.0);
  EXPECT_DOUBLE_EQ(rate, prefix["hit_tokens"].get<double>() / prefix["query_tokens"].get<double>());

  const auto text = test::run({FR_FASTRESTARTCTL_BIN, "--socket", m_dir / "ctl/t.ctl", "status"});
  EXPECT_NE(text.output.find("engine kv cache    pid " + std::to_string(second) + " arena, "), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("header valid: " + std::to_string(recovered) + " recovered, "), std::string::npos) << text.output;
  // Readiness and health checks keep asking while the test reads: the ctl's count is read afresh, so it is
  // at least what status saw, never less.
  const size_t hits_at = text.output.find("; prefix hits ");
  ASSERT_NE(hits_at, std::string::npos) << text.output;
  EXPECT_GE(std::stoull(text.output.substr(hits_at + 14)), prefix["hit_tokens"].get<uint64_t>()) << text.output;

  const std::string m = metrics();
  EXPECT_EQ(sample(m, "fastrestart_engine_kv_blocks_recovered"), static_cast<double>(recovered)) << m;
  EXPECT_NE(m.find("\nfastrestart_engine_kv_header{header=\"valid\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("\nfastrestart_engine_kv_blocks{location=\"arena\"} "), std::string::npos) << m;
  // Metrics are read afresh: at least the hits status saw.
  EXPECT_GE(sample(m, "fastrestart_engine_kv_prefix_hit_tokens_total"), prefix["hit_tokens"].get<double>()) << m;
  const double metric_rate = sample(m, "fastrestart_engine_kv_prefix_hit_rate");
  EXPECT_GT(metric_rate, 0.0) << m;
  EXPECT_LE(metric_rate, 1.0) << m;

  // Another block size (pushed flags): another identity. The next engine drops the whole index and status
  // says so by reason, every block the previous one held counted.
  const uint64_t held = st["kv_cache"]["recovered"].get<uint64_t>();
  auto r = m_sup->request({{"op", "reload"}, {"mode", "add"}, {"flags", json::array({"--block-size", "8"})}, {"wait", true}}, 90);
  ASSERT_TRUE(r.ok() && r->value("ok", false)) << (r.ok() ? r->dump() : r.error().message) << m_sup->log();
  ASSERT_TRUE(m_sup->wait_for([&](const json& s) {
    return s["kv_cache"].is_object() && s["kv_cache"]["pid"] != second && s["kv_cache"]["block_tokens"] == 8;
  }, 60, &st)) << st.dump(1) << m_sup->log();
  EXPECT_EQ(st["kv_cache"]["header"], "identity") << st["kv_cache"].dump();
  EXPECT_EQ(st["kv_cache"]["recovered"], 0);
  ASSERT_TRUE(st["kv_cache"]["dropped_by"].contains("identity")) << st["kv_cache"].dump();
  const uint64_t dropped = st["kv_cache"]["dropped_by"]["identity"].get<uint64_t>();
  EXPECT_GE(dropped, held) << st["kv_cache"].dump();
  const std::string after = metrics();
  EXPECT_EQ(sample(after, "fastrestart_engine_kv_blocks_dropped{reason=\"identity\"}"), static_cast<double>(dropped)) << after;
  EXPECT_EQ(sample(after, "fastrestart_engine_kv_blocks_recovered"), 0.0) << after;
}

}  // namespace
}  // namespace fr
