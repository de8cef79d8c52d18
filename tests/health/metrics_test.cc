// render_metrics: the exposition grammar (our checker, and promtool when installed) and the values.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "exposition_check.h"
#include "health/health_server.h"

namespace fr::health {
namespace {

using nlohmann::json;
using testing::check_exposition;

json sample_status() {
  return json::parse(R"({
    "name": "m", "state": "ready", "uptime_s": 12.5, "backoff_s": 2.0, "reload_in_progress": false,
    "engine": {"pid": 42, "uptime_s": 3.25, "path": "warm", "running": true},
    "restarts": {"crash": 3, "kernel_oom": 1, "hung": 0},
    "daemons": [
      {"gpu": "0", "state": "ready", "held_bytes": 18446744073709551615, "entries": 2,
       "progress": {"done_bytes": 50, "total_bytes": 100, "rate_bytes_per_s": 1.5e9},
       "socket": "/srv/fr/run/weightd-0.sock", "arena_bytes": 107376279553,
       "arenas": [{"name": "kv", "bytes": 107374182400, "pool_bytes": 107374182401, "holder_pid": 4321, "leases": 3,
                   "generation": 3, "waiting": 0, "waited_s": 0.083},
                  {"name": "kv.1", "bytes": 1, "pool_bytes": 2097152, "holder_pid": null, "leases": 1,
                   "generation": 1, "waiting": 0, "waited_s": null}]},
      {"gpu": "1", "state": "dead", "held_bytes": 0, "progress": {"done_bytes": 0, "total_bytes": 0, "rate_bytes_per_s": 0}}
    ],
    "memory": [
      {"gpu": "0", "total_bytes": 100, "used_bytes": 60, "free_bytes": 40, "budget_bytes": 90, "engine_share": 0.8125,
       "standby_reserve_bytes": 7, "arena_bytes": 9007199254740993, "engine_share_bytes": 18446744073709551615},
      {"gpu": "1", "error": "nvml: GPU lost"}
    ],
    "arena_outcome": {"outcome": "fallback", "pid": 42, "unix_time": 1764480000, "reason": "lease timed out"},
    "metrics": {
      "time_to_ready": {
        "warm": {"buckets": [[0.5, 1], [1, 3], [2.5, 4]], "count": 5, "sum": 7.5},
        "cold": {"buckets": [[10, 1]], "count": 1, "sum": 9}
      },
      "attaches": {"hit": 7, "fallback": 2, "none": 1,
                   "miss": {"fingerprint \"changed\"\nnew\\line": 2,
                            "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx": 1}},
      "reloads": {"warm": 4, "cold": 1, "rolled_back": 1}
    }
  })");
}

// The line starting with `prefix` followed by a space, without the prefix: the sample's value.
std::string value_of(const std::string& text, const std::string& series) {
  auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return "<absent>";
  auto start = at + 1 + series.size() + 1;
  return text.substr(start, text.find('\n', start) - start);
}

void expect_valid(const std::string& text) {
  auto errors = check_exposition(text);
  for (const auto& e : errors) ADD_FAILURE() << e;
  EXPECT_TRUE(errors.empty()) << text;
}

TEST(RenderMetrics, SampleStatusFollowsTheGrammar) { expect_valid(render_metrics(sample_status(), "0.1.0")); }

TEST(RenderMetrics, EmptyObjectFollowsTheGrammar) {
  const std::string text = render_metrics(json::object(), "0.1.0");
  expect_valid(text);
  EXPECT_EQ(value_of(text, "fastrestart_engine_up"), "0");
  EXPECT_EQ(value_of(text, "fastrestart_weight_attaches_total{result=\"hit\"}"), "0");
}

TEST(RenderMetrics, NonObjectsAndMistypedFieldsDoNotCrash) {
  for (const json& j : {json(nullptr), json(3), json("x"), json::array(),
                        json::parse(R"({"state": 1, "restarts": [1], "daemons": {"a": 1}, "memory": [null, 3],
                                        "metrics": {"time_to_ready": {"warm": {"buckets": "no", "count": "x"}},
                                                    "attaches": {"miss": 3, "hit": "many"}, "reloads": []},
                                        "backoff_s": "soon", "reload_in_progress": "yes"})")})
    expect_valid(render_metrics(j, "v"));
}

TEST(RenderMetrics, EngineUpAndStateFollowTheState) {
  const std::string text = render_metrics(sample_status(), "0.1.0");
  EXPECT_EQ(value_of(text, "fastrestart_engine_up"), "1");
  EXPECT_EQ(value_of(text, "fastrestart_state{state=\"ready\"}"), "1");
  EXPECT_EQ(value_of(text, "fastrestart_state{state=\"backoff\"}"), "0");
  json s = sample_status();
  s["state"] = "backoff";
  const std::string backoff = render_metrics(s, "0.1.0");
  EXPECT_EQ(value_of(backoff, "fastrestart_engine_up"), "0");
  EXPECT_EQ(value_of(backoff, "fastrestart_state{state=\"backoff\"}"), "1");
  EXPECT_EQ(value_of(backoff, "fastrestart_backoff_seconds"), "2");
}

TEST(RenderMetrics, RestartsByCause) {
  const std::string text = render_metrics(sample_status(), "0.1.0");
  EXPECT_EQ(value_of(text, "fastrestart_restarts_total{cause=\"crash\"}"), "3");
  EXPECT_EQ(value_of(text, "fastrestart_restarts_total{cause=\"kernel_oom\"}"), "1");
}

TEST(RenderMetrics, TimeToReadyHistogramPerPath) {
  const std::string text = render_metrics(sample_status(), "0.1.0");
  EXPECT_EQ(value_of(text, "fastrestart_time_to_ready_seconds_bucket{path=\"warm\",le=\"0.5\"}"), "1");
  EXPECT_EQ(value_of(text, "fastrestart_time_to_ready_seconds_bucket{path=\"warm\",le=\"2.5\"}"), "4");
  EXPECT_EQ(value_of(text, "fastrestart_time_to_ready_seconds_bucket{path=\"warm\",le=\"+Inf\"}"), "5");
  EXPECT_EQ(value_of(text, "fastrestart_time_to_ready_seconds_count{path=\"warm\"}"), "5");
  EXPECT_EQ(value_of(text, "fastrestart_time_to_ready_seconds_sum{path=\"warm\"}"), "7.5");
  EXPECT_EQ(value_of(text, "fastrestart_time_to_ready_seconds_count{path=\"cold\"}"), "1");
}

TEST(RenderMetrics, UnsortedAndDecreasingBucketsAreMadeMonotonic) {
  json s = {{"metrics", {{"time_to_ready", {{"warm", {{"buckets", {{5, 2}, {1, 3}, {1, 1}}}, {"count", 1}, {"sum", 1}}}}}}}};
  const std::string text = render_metrics(s, "v");
  expect_valid(text);
  EXPECT_EQ(value_of(text, "fastrestart_time_to_ready_seconds_bucket{path=\"warm\",le=\"1\"}"), "3");
  EXPECT_EQ(value_of(text, "fastrestart_time_to_ready_seconds_bucket{path=\"warm\",le=\"5\"}"), "3");
  EXPECT_EQ(value_of(text, "fastrestart_time_to_ready_seconds_count{path=\"warm\"}"), "3");
}

TEST(RenderMetrics, AttachesByResultWithEscapedTruncatedReasons) {
  const std::string text = render_metrics(sample_status(), "0.1.0");
  EXPECT_EQ(value_of(text, "fastrestart_weight_attaches_total{result=\"hit\"}"), "7");
  EXPECT_EQ(value_of(text, "fastrestart_weight_attaches_total{result=\"fallback\"}"), "2");
  EXPECT_EQ(value_of(text, "fastrestart_weight_attaches_total{result=\"none\"}"), "1");
  EXPECT_EQ(value_of(text, R"(fastrestart_weight_attaches_total{result="miss",reason="fingerprint \"changed\"\nnew\\line"})"), "2");
  EXPECT_EQ(value_of(text, "fastrestart_weight_attaches_total{result=\"miss\",reason=\"" + std::string(80, 'x') + "\"}"), "1");
}

TEST(RenderMetrics, TruncationKeepsWholeUtf8CodePoints) {
  std::string reason;
  for (int i = 0; i < 100; ++i) reason += "\xc3\xa9";  // é
  const std::string text = render_metrics({{"metrics", {{"attaches", {{"miss", {{reason, 1}}}}}}}}, "v");
  std::string expected;
  for (int i = 0; i < 80; ++i) expected += "\xc3\xa9";
  EXPECT_EQ(value_of(text, "fastrestart_weight_attaches_total{result=\"miss\",reason=\"" + expected + "\"}"), "1");
}

TEST(RenderMetrics, InvalidUtf8InLabelsIsReplaced) {
  json s = {{"restarts", {{std::string("bad\xff\xc3"), 1}}}, {"daemons", {{{"gpu", std::string("\xe9")}, {"state", "ready"}}}}};
  const std::string text = render_metrics(s, "v");
  expect_valid(text);
  EXPECT_EQ(value_of(text, "fastrestart_restarts_total{cause=\"bad\xef\xbf\xbd\xef\xbf\xbd\"}"), "1");
  EXPECT_EQ(value_of(text, "fastrestart_daemon_up{gpu=\"\xef\xbf\xbd\"}"), "1");
}

TEST(RenderMetrics, ReloadsByResult) {
  const std::string text = render_metrics(sample_status(), "0.1.0");
  EXPECT_EQ(value_of(text, "fastrestart_reloads_total{result=\"warm\"}"), "4");
  EXPECT_EQ(value_of(text, "fastrestart_reloads_total{result=\"cold\"}"), "1");
  EXPECT_EQ(value_of(text, "fastrestart_reloads_total{result=\"rolled_back\"}"), "1");
}

TEST(RenderMetrics, DaemonsPerGpu) {
  const std::string text = render_metrics(sample_status(), "0.1.0");
  EXPECT_EQ(value_of(text, "fastrestart_daemon_held_bytes{gpu=\"0\"}"), "18446744073709551615");
  EXPECT_EQ(value_of(text, "fastrestart_daemon_up{gpu=\"0\"}"), "1");
  EXPECT_EQ(value_of(text, "fastrestart_daemon_up{gpu=\"1\"}"), "0");
  EXPECT_EQ(value_of(text, "fastrestart_daemon_load_progress_ratio{gpu=\"0\"}"), "0.5");
  EXPECT_EQ(value_of(text, "fastrestart_daemon_load_rate_bytes_per_second{gpu=\"0\"}"), "1500000000");
}

// docs/health.md, "KV arenas": every byte figure exact (integers printed whole, above 2^53 too).
TEST(RenderMetrics, ArenasPerGpuAndName) {
  const std::string text = render_metrics(sample_status(), "0.1.0");
  EXPECT_EQ(value_of(text, "fastrestart_arena_bytes{gpu=\"0\",name=\"kv\"}"), "107374182401");
  EXPECT_EQ(value_of(text, "fastrestart_arena_bytes{gpu=\"0\",name=\"kv.1\"}"), "2097152");
  EXPECT_EQ(value_of(text, "fastrestart_arena_leases_total{gpu=\"0\",name=\"kv\"}"), "3");
  EXPECT_EQ(value_of(text, "fastrestart_arena_generation{gpu=\"0\",name=\"kv.1\"}"), "1");
  EXPECT_EQ(value_of(text, "fastrestart_arena_held{gpu=\"0\",name=\"kv\"}"), "1");
  EXPECT_EQ(value_of(text, "fastrestart_arena_held{gpu=\"0\",name=\"kv.1\"}"), "0");
  EXPECT_EQ(value_of(text, "fastrestart_arena_lease_wait_seconds{gpu=\"0\",name=\"kv\"}"), "0.083");
  EXPECT_EQ(value_of(text, "fastrestart_arena_lease_wait_seconds{gpu=\"0\",name=\"kv.1\"}"), "<absent>");
  EXPECT_EQ(value_of(text, "fastrestart_gpu_arena_bytes{gpu=\"0\"}"), "9007199254740993");
  EXPECT_EQ(value_of(text, "fastrestart_gpu_engine_memory_share_bytes{gpu=\"0\"}"), "18446744073709551615");
  EXPECT_EQ(value_of(text, "fastrestart_engine_arena_outcome{outcome=\"fallback\"}"), "1");
  // No arenas and no engine word: the families stay, without samples.
  json bare = sample_status();
  bare["daemons"][0].erase("arenas");
  bare.erase("arena_outcome");
  const std::string none = render_metrics(bare, "0.1.0");
  EXPECT_NE(none.find("# TYPE fastrestart_arena_bytes gauge\n# HELP"), std::string::npos) << none;
  EXPECT_EQ(none.find("fastrestart_arena_bytes{"), std::string::npos);
  EXPECT_EQ(none.find("fastrestart_engine_arena_outcome{"), std::string::npos);
  expect_valid(none);
}

TEST(RenderMetrics, GpuMemorySkipsErrors) {
  const std::string text = render_metrics(sample_status(), "0.1.0");
  EXPECT_EQ(value_of(text, "fastrestart_gpu_memory_total_bytes{gpu=\"0\"}"), "100");
  EXPECT_EQ(value_of(text, "fastrestart_gpu_memory_used_bytes{gpu=\"0\"}"), "60");
  EXPECT_EQ(value_of(text, "fastrestart_gpu_memory_free_bytes{gpu=\"0\"}"), "40");
  EXPECT_EQ(value_of(text, "fastrestart_gpu_memory_budget_bytes{gpu=\"0\"}"), "90");
  EXPECT_EQ(value_of(text, "fastrestart_gpu_memory_total_bytes{gpu=\"1\"}"), "<absent>");
  EXPECT_EQ(value_of(text, "fastrestart_gpu_engine_memory_share_ratio{gpu=\"0\"}"), "0.8125");
  EXPECT_EQ(value_of(text, "fastrestart_gpu_standby_reserve_bytes{gpu=\"0\"}"), "7");
  EXPECT_EQ(value_of(text, "fastrestart_daemon_entries{gpu=\"0\"}"), "2");
}

TEST(RenderMetrics, BuildInfoAndUptime) {
  const std::string text = render_metrics(sample_status(), "1.2.3");
  EXPECT_EQ(value_of(text, "fastrestart_build_info{version=\"1.2.3\"}"), "1");
  EXPECT_EQ(value_of(text, "fastrestart_uptime_seconds"), "12.5");
}

TEST(ExpositionCheck, RejectsBrokenText) {
  EXPECT_FALSE(check_exposition("x 1\n").empty());  // no TYPE
  EXPECT_FALSE(check_exposition("# HELP a_total h\n# TYPE a_total counter\na_total{l=\"\\q\"} 1\n").empty());
  EXPECT_FALSE(check_exposition("# HELP a h\n# TYPE a gauge\na one\n").empty());
  EXPECT_FALSE(check_exposition("# HELP a h\n# TYPE a counter\na 1\n").empty());  // counter without _total
  EXPECT_FALSE(check_exposition("# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
                                "h_sum 1\nh_count 1\n").empty());
  EXPECT_FALSE(check_exposition("# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n").empty());
  EXPECT_FALSE(check_exposition("# HELP h h\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n").empty());
  EXPECT_TRUE(check_exposition("# HELP h h\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n").empty());
}

// promtool (Debian package "prometheus") is the reference parser and linter.
void expect_promtool_passes(const std::string& text) {
  const char* promtool = "/usr/bin/promtool";
  if (access(promtool, X_OK) != 0) GTEST_SKIP() << "promtool not installed (apt-get install prometheus)";
  char path[] = "/tmp/fr_metrics_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  { std::ofstream(path) << text; }
  const std::string cmd = std::string(promtool) + " check metrics < " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = pclose(p);
  unlink(path);
  EXPECT_EQ(rc, 0) << out << "\n--- input ---\n" << text;
  EXPECT_EQ(out, "") << "promtool lint findings";
}

TEST(RenderMetrics, PromtoolAcceptsTheSampleStatus) { expect_promtool_passes(render_metrics(sample_status(), "0.1.0")); }
TEST(RenderMetrics, PromtoolAcceptsAnEmptyObject) { expect_promtool_passes(render_metrics(json::object(), "0.1.0")); }

// kind = "vllm": the engine's self-report and the loader plugin's attach times (docs/vllm.md).
TEST(RenderMetrics, VllmInfoAndLoaderAttachTimes) {
  json s = sample_status();
  s["engine"]["vllm"] = json::parse(R"({"version": {"value": "0.31.0", "line": "..."},
    "model_runner": {"value": "V1", "line": "..."},
    "loader": [{"result": "hit", "attach_ms": "1.9", "tp": "0/2"}, {"result": "miss", "attach_ms": "-", "tp": "1/2"}]})");
  const std::string text = render_metrics(s, "0.1.0");
  expect_valid(text);
  EXPECT_EQ(value_of(text, "fastrestart_vllm_info{version=\"0.31.0\",model_runner=\"V1\"}"), "1") << text;
  EXPECT_EQ(value_of(text, "fastrestart_loader_attach_seconds{line=\"0\",result=\"hit\"}"), "0.0019") << text;
  EXPECT_EQ(text.find("result=\"miss\"}"), std::string::npos) << "no attach time without an attach";
  EXPECT_EQ(render_metrics(sample_status(), "0.1.0").find("vllm_info"), std::string::npos);
}

// The engine's KV cache survival (docs/kv-survival.md, "In fastrestartd's status"): status kv_cache as
// gauges and counters; none before the engine's line; a mistyped kv_cache costs its samples only.
TEST(RenderMetrics, KvCacheRecoveryAndPrefixHits) {
  json s = sample_status();
  s["kv_cache"] = json::parse(R"({"pid": 42, "location": "arena", "header": "valid", "blocks": 64, "block_tokens": 16,
    "recovered": 58, "dropped": 4, "dropped_by": {"orphan": 3, "checksum": 1},
    "prefix": {"requests": 5, "query_tokens": 1000, "hit_tokens": 896, "hit_rate": 0.896}, "counters": "file", "error": ""})");
  const std::string text = render_metrics(s, "0.1.0");
  expect_valid(text);
  EXPECT_EQ(value_of(text, "fastrestart_engine_kv_blocks{location=\"arena\"}"), "64") << text;
  EXPECT_EQ(value_of(text, "fastrestart_engine_kv_header{header=\"valid\"}"), "1") << text;
  EXPECT_EQ(value_of(text, "fastrestart_engine_kv_blocks_recovered"), "58") << text;
  EXPECT_EQ(value_of(text, "fastrestart_engine_kv_blocks_dropped{reason=\"orphan\"}"), "3") << text;
  EXPECT_EQ(value_of(text, "fastrestart_engine_kv_blocks_dropped{reason=\"checksum\"}"), "1") << text;
  EXPECT_EQ(value_of(text, "fastrestart_engine_kv_prefix_requests_total"), "5") << text;
  EXPECT_EQ(value_of(text, "fastrestart_engine_kv_prefix_query_tokens_total"), "1000") << text;
  EXPECT_EQ(value_of(text, "fastrestart_engine_kv_prefix_hit_tokens_total"), "896") << text;
  EXPECT_EQ(value_of(text, "fastrestart_engine_kv_prefix_hit_rate"), "0.896") << text;

  const std::string none = render_metrics(sample_status(), "0.1.0");
  expect_valid(none);
  EXPECT_NE(none.find("# TYPE fastrestart_engine_kv_blocks_recovered gauge"), std::string::npos);
  EXPECT_EQ(value_of(none, "fastrestart_engine_kv_blocks_recovered"), "<absent>");
  s["kv_cache"]["recovered"] = "many";
  const std::string bad = render_metrics(s, "0.1.0");
  expect_valid(bad);
  EXPECT_EQ(value_of(bad, "fastrestart_engine_kv_blocks_recovered"), "<absent>");
  EXPECT_EQ(value_of(bad, "fastrestart_restarts_total{cause=\"crash\"}"), value_of(none, "fastrestart_restarts_total{cause=\"crash\"}"));
}

// engine.listen = "front" (docs/front.md, "Running it"): the front's families, only when status has a front.
TEST(RenderMetrics, TheFrontsCounters) {
  EXPECT_EQ(render_metrics(sample_status(), "0.1.0").find("fastrestart_front_"), std::string::npos);
  json s = sample_status();
  s["front"] = json::parse(R"J({"state": "running", "pid": 7, "upstream": "127.0.0.1:4000", "restarts": 2,
    "last_exit": "signal 9 (Killed)", "connections": 3,
    "requests": {"received": 20, "answered": 15, "held": 4, "held_now": 1, "resent": 6, "continued": 0, "lost": 1,
                 "rejected": {"400": 2}, "failed": {"hold_timeout": 1, "client_gone": 0}}})J");
  const std::string text = render_metrics(s, "0.1.0");
  expect_valid(text);
  EXPECT_EQ(value_of(text, "fastrestart_front_up"), "1");
  EXPECT_EQ(value_of(text, "fastrestart_front_restarts_total"), "2");
  EXPECT_EQ(value_of(text, "fastrestart_front_connections"), "3");
  EXPECT_EQ(value_of(text, "fastrestart_front_requests_received_total"), "20");
  EXPECT_EQ(value_of(text, "fastrestart_front_requests_total{outcome=\"answered\",reason=\"\"}"), "15");
  EXPECT_EQ(value_of(text, "fastrestart_front_requests_total{outcome=\"rejected\",reason=\"400\"}"), "2");
  EXPECT_EQ(value_of(text, "fastrestart_front_requests_total{outcome=\"failed\",reason=\"hold_timeout\"}"), "1");
  EXPECT_EQ(value_of(text, "fastrestart_front_requests_total{outcome=\"lost\",reason=\"\"}"), "1");
  EXPECT_EQ(value_of(text, "fastrestart_front_requests_held_total"), "4");
  EXPECT_EQ(value_of(text, "fastrestart_front_requests_held"), "1");
  EXPECT_EQ(value_of(text, "fastrestart_front_requests_resent_total"), "6");
  EXPECT_EQ(value_of(text, "fastrestart_front_streams_continued_total"), "0");
}

}  // namespace
}  // namespace fr::health
