// The supervisor's status codec (status/status.h): what status_json() encodes decodes to the same struct
// and re-encodes to the same JSON, and a mistyped field (or a missing one a row needs) is named in the error.
#include "status/status.h"

#include <gtest/gtest.h>

namespace fr::status {
namespace {

using nlohmann::json;

SupervisorStatus sample() {
  SupervisorStatus s;
  s.name = "m";
  s.config = "/etc/fastrestart/m.toml";
  s.state = "ready";
  s.status_text = "Serving";
  s.uptime_s = 12.5;
  EngineStatus e;
  e.pid = 42;
  e.uptime_s = 3.25;
  e.path = "warm";
  e.flags = {"--port", "8000", "--api-key", "<redacted>"};
  e.running = true;
  e.vllm = {{"version", {{"value", "0.31.0"}, {"line", "..."}}}, {"loader", json::array()}};
  s.engine = e;
  s.flags = e.flags;
  s.restarts = {{"crash", 3}, {"hung", 0}};
  s.rollbacks.count = 1;
  s.rollbacks.by_cause = {{"crash", 1}};
  s.rollbacks.recent = {json{{"unix_time", 1764480000}, {"cause", "crash"}, {"detail", "exit 1"}, {"rejected_flags", {"--x"}}}};
  LastExitStatus x;
  x.cause = "crash";
  x.detail = "exit status 1";
  x.unix_time = 1764480000;
  x.pid = 41;
  x.uptime_s = 30.5;
  x.died_at_s = 9000.25;
  x.was_ready = true;
  s.last_exit = x;
  LastStartStatus r;
  r.path = "cold";
  r.time_to_ready_s = 1.5;
  r.since_previous_exit_s = 1.75;
  r.ready_at_s = 9002;
  r.unix_time = 1764480002;
  r.pid = 42;
  r.start_paths = {{"warm", "failed", "no_attach", "loaded from disk"}, {"cold", "started", std::nullopt, ""}};
  r.expected = "warm";
  r.warm_miss = "no entries";
  s.last_start = r;
  s.start_paths = {{"snapshot", "skipped", "no_snapshot", "no snapshot yet"}, {"warm", "started", std::nullopt, ""}};
  DaemonRowStatus d;
  d.gpu = "0";
  d.pid = 7;
  d.socket = "/srv/fr/run/weightd-0.sock";
  d.state = "ready";
  d.held_bytes = 18446744073709551615ull;  // every digit survives
  d.entries = 1;
  d.progress = {50, 100, 1.5e9};
  d.arena_bytes = 107374182400ull + 2097152;
  d.arenas.push_back({"kv", 107374182400ull, 107374182400ull, 4321, 3, 3, 0, 0.083});
  d.arenas.push_back({"kv.1", 1, 2097152, std::nullopt, 1, 1, 0, std::nullopt});
  s.daemons.push_back(d);
  DaemonRowStatus p;
  p.gpu = p.kind = "vllm-preload";
  p.pid = 8;
  p.state = "loading";
  p.preload = PreloadDetails{"http://127.0.0.1:9000/health", {"vllm", "preload"}, {"/models/a.safetensors"}};
  s.daemons.push_back(p);
  MemoryRowStatus m;
  m.gpu = "0";
  m.uuid = "GPU-1";
  m.name = "H200";
  m.total_bytes = 100;
  m.used_bytes = 60;
  m.free_bytes = 40;
  m.budget_bytes = 90;
  m.daemon_held_bytes = 30;
  m.standby_reserve_bytes = 2;
  m.engine_share = 0.5625;
  m.arena_bytes = 20;
  m.engine_share_bytes = 56;
  m.engine_own_bytes = 36;
  s.memory.push_back(m);
  MemoryRowStatus lost;
  lost.gpu = "1";
  lost.error = "nvml: GPU lost";
  s.memory.push_back(lost);
  s.memory_utilization = 0.9;
  s.engine_share_refused = "GPU 1: share -0.0288 is below memory.min_share 0.0500";
  ArenaOutcomeStatus o;
  o.outcome = "leased";
  o.pid = 42;
  o.unix_time = 1764480000;
  o.name = "kv";
  o.bytes = 107374182400ull;
  o.waited_s = 0.081;
  o.swap_s = 0.003;
  o.generation = 3;
  s.arena_outcome = o;
  s.backoff_s = 2;
  s.reload_in_progress = true;
  s.snapshot = {{"enabled", false}, {"problem", "snapshot.enabled is false"}};
  s.metrics.time_to_ready["warm"] = HistogramStatus{{{0.5, 1}, {1.0, 3}}, 3, 2.5};
  s.metrics.attaches_hit = 7;
  s.metrics.attaches_fallback = 2;
  s.metrics.attach_misses = {{"no entries", 2}};
  s.metrics.reloads_warm = 4;
  s.metrics.reloads_rolled_back = 1;
  s.metrics.start_paths = {{"warm", "started", "", 5}};
  s.metrics.rollbacks = {{"crash", 1}};
  s.metrics.snapshots = SnapshotCounts{1, 0, 2, 1};
  StandbyStatus sb;
  sb.state = "parked";
  sb.level = "warmed";
  sb.pid = 77;
  sb.age_s = 4.5;
  sb.gpu_bytes = 778043392;
  sb.reserve_bytes = 778043392;
  sb.spawns = 3;
  sb.releases = 2;
  sb.failures = {{"died", 1}};
  sb.last_failure = "died while parked: crash (killed by signal 9)";
  sb.release_to_ready_s = 0.08;
  sb.death_to_ready_s = 0.12;
  s.standby = sb;
  return s;
}

TEST(SupervisorStatusCodec, RoundTrips) {
  const json wire = to_json(sample());
  auto back = supervisor_status_from_json(wire);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(to_json(*back), wire);
  EXPECT_EQ(back->daemons[0].held_bytes, 18446744073709551615ull);
  ASSERT_EQ(back->daemons[0].arenas.size(), 2u);
  EXPECT_EQ(back->daemons[0].arena_bytes, 107376279552ull);
  EXPECT_EQ(back->daemons[0].arenas[0].holder_pid.value_or(0), 4321);
  EXPECT_EQ(back->daemons[0].arenas[0].last_wait_s.value_or(0), 0.083);
  EXPECT_FALSE(back->daemons[0].arenas[1].holder_pid);
  EXPECT_EQ(back->daemons[0].arenas[1].pool_bytes, 2097152u);
  EXPECT_EQ(back->memory[0].engine_share_bytes.value_or(0), 56u);
  EXPECT_EQ(back->memory[0].engine_own_bytes.value_or(0), 36u);
  ASSERT_TRUE(back->arena_outcome.has_value());
  EXPECT_EQ(back->arena_outcome->bytes, 107374182400ull);
  EXPECT_EQ(back->arena_outcome->generation, 3u);
  ASSERT_TRUE(back->daemons[1].preload.has_value());
  EXPECT_EQ(back->daemons[1].preload->watched_files.front(), "/models/a.safetensors");
  EXPECT_FALSE(back->daemons[1].socket.has_value());
  EXPECT_EQ(back->memory[1].error.value_or(""), "nvml: GPU lost");
  EXPECT_EQ(back->memory[0].standby_reserve_bytes, 2u);
  EXPECT_EQ(back->engine_share_refused.value_or(""), "GPU 1: share -0.0288 is below memory.min_share 0.0500");
  EXPECT_FALSE(back->start_paths[1].reason.has_value());
  ASSERT_TRUE(back->standby.has_value());
  EXPECT_EQ(back->standby->gpu_bytes, 778043392u);
  EXPECT_EQ(back->standby->death_to_ready_s.value_or(0), 0.12);
}

// The documented wire form (docs/supervisor.md, docs/health.md): the field names stay as they are.
TEST(SupervisorStatusCodec, WireFormKeepsTheDocumentedFields) {
  const json j = to_json(sample());
  for (const char* k : {"name", "config", "state", "status_text", "uptime_s", "engine", "flags", "restarts", "rollbacks",
                        "last_exit", "last_start", "start_paths", "daemons", "memory", "memory_utilization", "backoff_s",
                        "engine_share_refused", "failure", "reload_in_progress", "snapshot", "metrics"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["engine"]["vllm"]["version"]["value"], "0.31.0");
  EXPECT_EQ(j["daemons"][0]["progress"]["done_bytes"], 50);
  EXPECT_EQ(j["daemons"][1]["kind"], "vllm-preload");
  EXPECT_FALSE(j["daemons"][0].contains("kind"));
  EXPECT_EQ(j["memory"][1], (json{{"gpu", "1"}, {"error", "nvml: GPU lost"}}));
  EXPECT_EQ(j["metrics"]["time_to_ready"]["warm"]["buckets"], (json{{0.5, 1}, {1.0, 3}}));
  EXPECT_EQ(j["metrics"]["attaches"]["miss"]["no entries"], 2);
  EXPECT_EQ(j["start_paths"][1], (json{{"path", "warm"}, {"outcome", "started"}}));
  EXPECT_EQ(j["rollbacks"]["count"], 1);
  EXPECT_EQ(j["daemons"][0]["arenas"][0], (json{{"name", "kv"}, {"bytes", 107374182400ull}, {"pool_bytes", 107374182400ull},
                                               {"holder_pid", 4321}, {"leases", 3}, {"generation", 3}, {"waiting", 0},
                                               {"waited_s", 0.083}}));
  EXPECT_TRUE(j["daemons"][0]["arenas"][1]["holder_pid"].is_null());
  EXPECT_TRUE(j["daemons"][0]["arenas"][1]["waited_s"].is_null());
  EXPECT_FALSE(j["daemons"][1].contains("arenas"));  // vllm preload has none
  EXPECT_EQ(j["memory"][0]["arena_bytes"], 20);
  EXPECT_EQ(j["arena_outcome"], (json{{"outcome", "leased"}, {"pid", 42}, {"unix_time", 1764480000.0}, {"name", "kv"},
                                      {"bytes", 107374182400ull}, {"waited_s", 0.081}, {"swap_s", 0.003}, {"generation", 3}}));
  SupervisorStatus fell = sample();
  fell.arena_outcome = ArenaOutcomeStatus{"fallback", 43, 1764480001, "", 0, 0, 0, 0, "arena_lease.wait_s: timed out"};
  EXPECT_EQ(to_json(fell)["arena_outcome"], (json{{"outcome", "fallback"}, {"pid", 43}, {"unix_time", 1764480001.0},
                                                  {"reason", "arena_lease.wait_s: timed out"}}));
  fell.arena_outcome.reset();
  EXPECT_TRUE(to_json(fell)["arena_outcome"].is_null());
  for (const char* k : {"state", "level", "pid", "age_s", "gpu_bytes", "reserve_bytes", "spawns", "releases", "failures",
                        "disabled", "last_failure", "failures_in_row", "backoff_s", "last_release"})
    EXPECT_TRUE(j["standby"].contains(k)) << k;
  EXPECT_EQ(j["standby"]["last_release"]["release_to_ready_s"], 0.08);
  SupervisorStatus idle = sample();
  idle.engine.reset();
  idle.standby.reset();
  EXPECT_TRUE(to_json(idle)["engine"].is_null());
  EXPECT_TRUE(to_json(idle)["standby"].is_null());
}

// The last exit and the last start (docs/supervisor.md): typed rows with the field names status always
// had; the optional members are left out of the wire form when unset, as the lifecycle wrote them.
TEST(SupervisorStatusCodec, TheLastExitAndStartRowsRoundTrip) {
  const json j = to_json(sample());
  EXPECT_EQ(j["last_exit"], (json{{"cause", "crash"}, {"detail", "exit status 1"}, {"unix_time", 1764480000}, {"pid", 41},
                                  {"uptime_s", 30.5}, {"died_at_s", 9000.25}, {"was_ready", true}}));
  EXPECT_EQ(j["last_start"], (json{{"path", "cold"}, {"time_to_ready_s", 1.5}, {"since_previous_exit_s", 1.75},
                                   {"ready_at_s", 9002.0}, {"unix_time", 1764480002}, {"pid", 42},
                                   {"start_paths", {{{"path", "warm"}, {"outcome", "failed"}, {"reason", "no_attach"},
                                                     {"detail", "loaded from disk"}},
                                                    {{"path", "cold"}, {"outcome", "started"}}}},
                                   {"expected", "warm"}, {"warm_miss", "no entries"}}));
  auto back = supervisor_status_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message;
  ASSERT_TRUE(back->last_exit.has_value());
  EXPECT_EQ(back->last_exit->died_at_s.value_or(0), 9000.25);
  EXPECT_EQ(back->last_exit->was_ready.value_or(false), true);
  ASSERT_TRUE(back->last_start.has_value());
  EXPECT_EQ(back->last_start->warm_miss.value_or(""), "no entries");
  EXPECT_FALSE(back->last_start->snapshot_id.has_value());
  ASSERT_EQ(back->last_start->start_paths.size(), 2u);
  EXPECT_EQ(back->last_start->start_paths[0].reason.value_or(""), "no_attach");
  EXPECT_EQ(to_json(*back), j);

  // An engine that never ran (its spawn failed): cause, detail and time only.
  LastExitStatus unrun;
  unrun.cause = "crash";
  unrun.detail = "exec: No such file or directory";
  unrun.unix_time = 1764480003;
  EXPECT_EQ(to_json(unrun), (json{{"cause", "crash"}, {"detail", "exec: No such file or directory"}, {"unix_time", 1764480003}}));
  // A restored engine released from a standby: the rows it adds.
  LastStartStatus restored;
  restored.path = "snapshot";
  restored.snapshot_id = "s-1";
  restored.standby_level = "warmed";
  const json rj = to_json(restored);
  EXPECT_EQ(rj["snapshot_id"], "s-1");
  EXPECT_EQ(rj["standby_level"], "warmed");
  EXPECT_FALSE(rj.contains("expected"));
  EXPECT_FALSE(rj.contains("warm_miss"));

  // Before any exit or READY: null, and null decodes to none.
  SupervisorStatus fresh = sample();
  fresh.last_exit.reset();
  fresh.last_start.reset();
  const json fj = to_json(fresh);
  EXPECT_TRUE(fj["last_exit"].is_null());
  EXPECT_TRUE(fj["last_start"].is_null());
  auto none = supervisor_status_from_json(fj);
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_FALSE(none->last_exit.has_value());
  EXPECT_FALSE(none->last_start.has_value());
}

TEST(SupervisorStatusCodec, AbsentFieldsKeepTheirDefaults) {
  auto s = supervisor_status_from_json(json::object());
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_FALSE(s->engine.has_value());
  EXPECT_EQ(s->metrics.attaches_hit, 0u);
}

TEST(SupervisorStatusCodec, MalformedStatusNamesTheField) {
  auto expect_error = [](json j, const std::string& want) {
    auto s = supervisor_status_from_json(j);
    ASSERT_FALSE(s.ok()) << j.dump();
    EXPECT_EQ(s.error().message, want);
  };
  json j = to_json(sample());
  j["engine"]["pid"] = "42";
  expect_error(j, "status.engine.pid: not an integer");
  j = to_json(sample());
  j["daemons"][1]["progress"]["done_bytes"] = -1;
  expect_error(j, "status.daemons[1].progress.done_bytes: not an unsigned integer");
  j = to_json(sample());
  j["metrics"]["time_to_ready"]["warm"]["buckets"][0] = "x";
  expect_error(j, "status.metrics.time_to_ready.warm.buckets[0]: not a pair [le, count]");
  j = to_json(sample());
  j["restarts"]["crash"] = true;
  expect_error(j, "status.restarts.crash: not an unsigned integer");
  j = to_json(sample());
  j["memory"][0]["used_bytes"] = 1.5;
  expect_error(j, "status.memory[0].used_bytes: not an unsigned integer");
  j = to_json(sample());
  j["daemons"][0]["arenas"][1]["pool_bytes"] = "2097152";
  expect_error(j, "status.daemons[0].arenas[1].pool_bytes: not an unsigned integer");
  j = to_json(sample());
  j["arena_outcome"]["generation"] = -3;
  expect_error(j, "status.arena_outcome.generation: not an unsigned integer");
  j = to_json(sample());
  j["standby"]["gpu_bytes"] = "1";
  expect_error(j, "status.standby.gpu_bytes: not an unsigned integer");
  j = to_json(sample());
  j["standby"]["last_release"]["release_to_ready_s"] = "fast";
  expect_error(j, "status.standby.last_release.release_to_ready_s: not a number");
  j = to_json(sample());
  j["last_exit"]["died_at_s"] = "later";
  expect_error(j, "status.last_exit.died_at_s: not a number");
  j = to_json(sample());
  j["last_exit"]["pid"] = 41.5;
  expect_error(j, "status.last_exit.pid: not an integer");
  j = to_json(sample());
  j["last_exit"].erase("cause");
  expect_error(j, "status.last_exit.cause: missing");
  j = to_json(sample());
  j["last_exit"] = "crash";
  expect_error(j, "status.last_exit: not an object");
  j = to_json(sample());
  j["last_start"]["path"] = nullptr;
  expect_error(j, "status.last_start.path: missing");
  j = to_json(sample());
  j["last_start"]["time_to_ready_s"] = "1.5";
  expect_error(j, "status.last_start.time_to_ready_s: not a number");
  j = to_json(sample());
  j["last_start"]["start_paths"][1]["outcome"] = 3;
  expect_error(j, "status.last_start.start_paths[1].outcome: not a string");
  j = to_json(sample());
  j["last_start"]["warm_miss"] = false;
  expect_error(j, "status.last_start.warm_miss: not a string");
  j = to_json(sample());
  j["last_start"] = json::array();
  expect_error(j, "status.last_start: not an object");
  expect_error(json::array(), "status: not an object");
  expect_error(json{{"state", 1}}, "status.state: not a string");
}

}  // namespace
}  // namespace fr::status

namespace fr::status {
namespace {

// engine.listen = "front": the front's row (docs/front.md, "Running it") round-trips, is absent (null)
// without a front, and a mistyped counter is named.
TEST(SupervisorStatusCodec, TheFrontRoundTrips) {
  SupervisorStatus s;
  EXPECT_TRUE(to_json(s)["front"].is_null());
  FrontStatus f;
  f.state = "running";
  f.pid = 4242;
  f.upstream = "127.0.0.1:41234";
  f.restarts = 1;
  f.last_exit = "signal 9 (Killed)";
  f.connections = 3;
  f.requests.received = 120;
  f.requests.answered = 117;
  f.requests.held = 9;
  f.requests.held_now = 1;
  f.requests.resent = 14;
  f.requests.lost = 2;
  f.requests.rejected = {{"400", 2}};
  f.requests.failed = {{"client_gone", 1}};
  s.front = f;
  const json j = to_json(s);
  EXPECT_EQ(j["front"]["requests"]["failed"]["client_gone"], 1);
  auto back = supervisor_status_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message;
  ASSERT_TRUE(back->front.has_value());
  EXPECT_EQ(to_json(*back), j);
  json bad = j;
  bad["front"]["requests"]["lost"] = "2";
  auto e = supervisor_status_from_json(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message, "status.front.requests.lost: not an unsigned integer");
}

}  // namespace
}  // namespace fr::status
