#include "status/status.h"

#include "common/json_fields.h"

namespace fr::status {

using nlohmann::json;
using json_fields::child_fields;
using json_fields::fields;
using json_fields::object;
using json_fields::or_null;
using json_fields::set_if;

// The readers below are found by argument-dependent lookup from json_fields' vector and map readers.

static Status read_arena_outcome(const json& j, const std::string& w, ArenaOutcomeStatus& a) {
  return fields(j, w, "outcome", a.outcome, "pid", a.pid, "unix_time", a.unix_time, "name", a.name, "bytes", a.bytes,
                "waited_s", a.waited_s, "swap_s", a.swap_s, "generation", a.generation, "reason", a.reason);
}

static Status read(const json& j, const std::string& w, DaemonRowStatus& d) {
  FR_TRY(fields(j, w, "gpu", d.gpu, "kind", d.kind, "pid", d.pid, "socket", d.socket, "state", d.state, "error", d.error,
                "held_bytes", d.held_bytes, "entries", d.entries, "arena_bytes", d.arena_bytes));
  FR_TRY(proto::read_arenas(j, "arenas", w, d.arenas, "waited_s"));
  FR_TRY(proto::read_progress(j, w, d.progress));
  if (j.contains("health") || j.contains("argv") || j.contains("watched_files")) {
    PreloadDetails p;
    FR_TRY(fields(j, w, "health", p.health, "argv", p.argv, "watched_files", p.watched_files));
    d.preload = std::move(p);
  }
  return {};
}

static Status read(const json& j, const std::string& w, MemoryRowStatus& m) {
  FR_TRY(fields(j, w, "gpu", m.gpu, "error", m.error));
  if (m.error) return {};
  return fields(j, w, "uuid", m.uuid, "name", m.name, "total_bytes", m.total_bytes, "used_bytes", m.used_bytes,
                "free_bytes", m.free_bytes, "budget_bytes", m.budget_bytes, "daemon_held_bytes", m.daemon_held_bytes,
                "standby_reserve_bytes", m.standby_reserve_bytes, "engine_share", m.engine_share, "arena_bytes",
                m.arena_bytes, "engine_share_bytes", m.engine_share_bytes, "engine_own_bytes", m.engine_own_bytes);
}

static Status read(const json& j, const std::string& w, StartAttemptStatus& a) {
  return fields(j, w, "path", a.path, "outcome", a.outcome, "reason", a.reason, "detail", a.detail);
}

static Status read(const json& j, const std::string& w, LastExitStatus& e) {
  FR_TRY(object(j, w));
  FR_TRY(json_fields::required(j, "cause", w, e.cause));
  return fields(j, w, "detail", e.detail, "unix_time", e.unix_time, "pid", e.pid, "uptime_s", e.uptime_s, "died_at_s",
                e.died_at_s, "was_ready", e.was_ready);
}

static Status read(const json& j, const std::string& w, LastStartStatus& s) {
  FR_TRY(object(j, w));
  FR_TRY(json_fields::required(j, "path", w, s.path));
  return fields(j, w, "time_to_ready_s", s.time_to_ready_s, "since_previous_exit_s", s.since_previous_exit_s,
                "ready_at_s", s.ready_at_s, "unix_time", s.unix_time, "pid", s.pid, "start_paths", s.start_paths,
                "snapshot_id", s.snapshot_id, "expected", s.expected, "warm_miss", s.warm_miss, "standby_level",
                s.standby_level);
}

static Status read(const json& j, const std::string& w, StartPathCount& c) {
  return fields(j, w, "path", c.path, "outcome", c.outcome, "reason", c.reason, "count", c.count);
}

static Status read(const json& j, const std::string& w, HistogramStatus& h) {
  FR_TRY(object(j, w));
  if (auto it = j.find("buckets"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) return json_fields::bad(w + ".buckets", "not an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const json& b = (*it)[i];
      const std::string bw = w + ".buckets[" + std::to_string(i) + "]";
      if (!b.is_array() || b.size() != 2) return json_fields::bad(bw, "not a pair [le, count]");
      std::pair<double, uint64_t> p;
      FR_TRY(json_fields::read(b[0], bw + "[0]", p.first));
      FR_TRY(json_fields::read(b[1], bw + "[1]", p.second));
      h.buckets.push_back(p);
    }
  }
  return fields(j, w, "count", h.count, "sum", h.sum);
}

static Status read_standby(const json& j, const std::string& w, StandbyStatus& s) {
  FR_TRY(fields(j, w, "state", s.state, "level", s.level, "pid", s.pid, "age_s", s.age_s, "gpu_bytes", s.gpu_bytes,
                "reserve_bytes", s.reserve_bytes, "spawns", s.spawns, "releases", s.releases, "failures", s.failures,
                "disabled", s.disabled, "last_failure", s.last_failure, "failures_in_row", s.failures_in_row,
                "backoff_s", s.backoff_s));
  return child_fields(j, "last_release", w, "death_to_release_s", s.death_to_release_s, "release_to_ready_s",
                      s.release_to_ready_s, "death_to_ready_s", s.death_to_ready_s);
}

json to_json(const StandbyStatus& s) {
  json last = nullptr;
  if (s.death_to_release_s || s.release_to_ready_s || s.death_to_ready_s) {
    last = json::object();
    if (s.death_to_release_s) last["death_to_release_s"] = *s.death_to_release_s;
    if (s.release_to_ready_s) last["release_to_ready_s"] = *s.release_to_ready_s;
    if (s.death_to_ready_s) last["death_to_ready_s"] = *s.death_to_ready_s;
  }
  return {{"state", s.state},         {"level", s.level},       {"pid", s.pid},
          {"age_s", s.age_s},         {"gpu_bytes", s.gpu_bytes}, {"reserve_bytes", s.reserve_bytes},
          {"spawns", s.spawns},       {"releases", s.releases}, {"failures", json(s.failures)},
          {"disabled", s.disabled},   {"last_failure", s.last_failure}, {"failures_in_row", s.failures_in_row},
          {"backoff_s", s.backoff_s}, {"last_release", last}};
}

static Status read_front(const json& j, const std::string& w, FrontStatus& f) {
  FR_TRY(fields(j, w, "state", f.state, "pid", f.pid, "upstream", f.upstream, "restarts", f.restarts, "last_exit",
                f.last_exit, "connections", f.connections));
  auto& r = f.requests;
  return child_fields(j, "requests", w, "received", r.received, "answered", r.answered, "held", r.held, "held_now",
                      r.held_now, "resent", r.resent, "continued", r.continued, "lost", r.lost, "rejected", r.rejected,
                      "failed", r.failed);
}

json to_json(const FrontStatus& f) {
  const auto& r = f.requests;
  return {{"state", f.state}, {"pid", f.pid}, {"upstream", f.upstream}, {"restarts", f.restarts},
          {"last_exit", f.last_exit}, {"connections", f.connections},
          {"requests",
           {{"received", r.received}, {"answered", r.answered}, {"held", r.held}, {"held_now", r.held_now},
            {"resent", r.resent}, {"continued", r.continued}, {"lost", r.lost}, {"rejected", json(r.rejected)},
            {"failed", json(r.failed)}}}};
}

static Status read_metrics(const json& j, const std::string& w, MetricsStatus& m) {
  FR_TRY(fields(j, w, "time_to_ready", m.time_to_ready));
  FR_TRY(child_fields(j, "attaches", w, "hit", m.attaches_hit, "fallback", m.attaches_fallback, "none", m.attaches_none,
                      "miss", m.attach_misses));
  FR_TRY(child_fields(j, "reloads", w, "warm", m.reloads_warm, "cold", m.reloads_cold, "rolled_back",
                      m.reloads_rolled_back));
  FR_TRY(fields(j, w, "start_paths", m.start_paths, "rollbacks", m.rollbacks));
  if (auto it = j.find("snapshots"); it != j.end() && !it->is_null()) {
    SnapshotCounts c;
    FR_TRY(fields(*it, w + ".snapshots", "created", c.created, "create_failures", c.create_failures, "restored",
                  c.restored, "fallbacks", c.fallbacks));
    m.snapshots = c;
  }
  return {};
}

json to_json(const ArenaOutcomeStatus& a) {
  json j{{"outcome", a.outcome}, {"pid", a.pid}, {"unix_time", a.unix_time}};
  if (a.outcome == "fallback") {
    j["reason"] = a.reason;
  } else {
    j.update({{"name", a.name}, {"bytes", a.bytes}, {"waited_s", a.waited_s}, {"swap_s", a.swap_s},
              {"generation", a.generation}});
  }
  return j;
}

json to_json(const DaemonRowStatus& d) {
  json j{{"gpu", d.gpu}, {"pid", d.pid}, {"state", d.state}, {"error", d.error}, {"held_bytes", d.held_bytes},
         {"entries", d.entries}, {"progress", proto::to_json(d.progress)}};
  if (!d.kind.empty()) j["kind"] = d.kind;
  if (d.socket) {  // a native daemon: its arenas (none for the other kinds)
    j["socket"] = *d.socket;
    json arenas = json::array();
    for (const auto& a : d.arenas) arenas.push_back(proto::to_json(a, "waited_s"));
    j["arena_bytes"] = d.arena_bytes;
    j["arenas"] = std::move(arenas);
  }
  if (d.preload) {
    j["health"] = d.preload->health;
    j["argv"] = d.preload->argv;
    j["watched_files"] = d.preload->watched_files;
  }
  return j;
}

json to_json(const StartAttemptStatus& a) {
  json row{{"path", a.path}, {"outcome", a.outcome}};
  if (a.reason) row.update({{"reason", *a.reason}, {"detail", a.detail}});
  return row;
}

json to_json(const LastExitStatus& e) {
  json j{{"cause", e.cause}, {"detail", e.detail}, {"unix_time", e.unix_time}};
  set_if(j, "pid", e.pid, "uptime_s", e.uptime_s, "died_at_s", e.died_at_s, "was_ready", e.was_ready);
  return j;
}

json to_json(const LastStartStatus& s) {
  json attempts = json::array();
  for (const auto& a : s.start_paths) attempts.push_back(to_json(a));
  json j{{"path", s.path}, {"time_to_ready_s", s.time_to_ready_s}, {"since_previous_exit_s", s.since_previous_exit_s},
         {"ready_at_s", s.ready_at_s}, {"unix_time", s.unix_time}, {"pid", s.pid}, {"start_paths", attempts}};
  set_if(j, "snapshot_id", s.snapshot_id, "expected", s.expected, "warm_miss", s.warm_miss, "standby_level",
         s.standby_level);
  return j;
}

namespace {

json to_json(const MemoryRowStatus& m) {
  if (m.error) return {{"gpu", m.gpu}, {"error", *m.error}};
  json j = {{"gpu", m.gpu}, {"uuid", m.uuid}, {"name", m.name}, {"total_bytes", m.total_bytes},
            {"used_bytes", m.used_bytes}, {"free_bytes", m.free_bytes}, {"budget_bytes", m.budget_bytes},
            {"daemon_held_bytes", m.daemon_held_bytes}, {"standby_reserve_bytes", m.standby_reserve_bytes}};
  j["arena_bytes"] = m.arena_bytes;
  set_if(j, "engine_share", m.engine_share, "engine_share_bytes", m.engine_share_bytes, "engine_own_bytes",
         m.engine_own_bytes);
  return j;
}

json to_json(const MetricsStatus& m) {
  json hist = json::object();
  for (const auto& [path, h] : m.time_to_ready) {
    json b = json::array();
    for (const auto& [le, n] : h.buckets) b.push_back({le, n});
    hist[path] = {{"buckets", b}, {"count", h.count}, {"sum", h.sum}};
  }
  json attaches{{"hit", m.attaches_hit}, {"fallback", m.attaches_fallback}, {"none", m.attaches_none},
                {"miss", json(m.attach_misses)}};
  json start_paths = json::array();
  for (const auto& c : m.start_paths)
    start_paths.push_back({{"path", c.path}, {"outcome", c.outcome}, {"reason", c.reason}, {"count", c.count}});
  json j{{"time_to_ready", hist},
         {"attaches", attaches},
         {"reloads", {{"warm", m.reloads_warm}, {"cold", m.reloads_cold}, {"rolled_back", m.reloads_rolled_back}}},
         {"start_paths", start_paths},
         {"rollbacks", json(m.rollbacks)}};
  if (m.snapshots)
    j["snapshots"] = {{"created", m.snapshots->created}, {"create_failures", m.snapshots->create_failures},
                      {"restored", m.snapshots->restored}, {"fallbacks", m.snapshots->fallbacks}};
  return j;
}

}  // namespace

json to_json(const SupervisorStatus& s) {
  json engine = nullptr;
  if (s.engine) {
    const EngineStatus& e = *s.engine;
    engine = {{"pid", e.pid}, {"uptime_s", e.uptime_s}, {"path", e.path}, {"snapshot_id", e.snapshot_id},
              {"flags", e.flags}, {"running", e.running}, {"readiness_endpoint", e.readiness_endpoint}};
    if (!e.vllm.is_null()) engine["vllm"] = e.vllm;
  }
  json daemons = json::array();
  for (const auto& d : s.daemons) daemons.push_back(to_json(d));
  json memory = json::array();
  for (const auto& m : s.memory) memory.push_back(to_json(m));
  json attempts = json::array();
  for (const auto& a : s.start_paths) attempts.push_back(to_json(a));
  json recent = json::array();
  for (const auto& r : s.rollbacks.recent) recent.push_back(r);
  return {{"name", s.name}, {"config", s.config}, {"state", s.state}, {"status_text", s.status_text},
          {"uptime_s", s.uptime_s}, {"engine", engine}, {"flags", s.flags}, {"restarts", json(s.restarts)},
          {"rollbacks", {{"count", s.rollbacks.count}, {"by_cause", json(s.rollbacks.by_cause)}, {"recent", recent}}},
          {"last_exit", s.last_exit ? to_json(*s.last_exit) : json(nullptr)},
          {"last_start", s.last_start ? to_json(*s.last_start) : json(nullptr)},
          {"start_paths", attempts}, {"daemons", daemons}, {"memory", memory},
          {"memory_utilization", s.memory_utilization}, {"engine_share_refused", or_null(s.engine_share_refused)},
          {"arena_outcome", s.arena_outcome ? to_json(*s.arena_outcome) : json(nullptr)},
          {"backoff_s", s.backoff_s}, {"failure", s.failure}, {"reload_in_progress", s.reload_in_progress},
          {"snapshot", s.snapshot}, {"standby", s.standby ? to_json(*s.standby) : json(nullptr)},
          {"front", s.front ? to_json(*s.front) : json(nullptr)}, {"metrics", to_json(s.metrics)}};
}

Result<SupervisorStatus> supervisor_status_from_json(const json& j, const std::string& w) {
  SupervisorStatus s;
  FR_TRY(fields(j, w, "name", s.name, "config", s.config, "state", s.state, "status_text", s.status_text, "uptime_s",
                s.uptime_s));
  if (auto it = j.find("engine"); it != j.end() && !it->is_null()) {
    const std::string ew = w + ".engine";
    EngineStatus e;
    FR_TRY(fields(*it, ew, "pid", e.pid, "uptime_s", e.uptime_s, "path", e.path, "snapshot_id", e.snapshot_id, "flags",
                  e.flags, "running", e.running, "readiness_endpoint", e.readiness_endpoint));
    if (auto v = it->find("vllm"); v != it->end()) {
      if (!v->is_object() && !v->is_null()) return json_fields::bad(ew + ".vllm", "not an object");
      e.vllm = *v;
    }
    s.engine = std::move(e);
  }
  FR_TRY(fields(j, w, "flags", s.flags, "restarts", s.restarts));
  FR_TRY(child_fields(j, "rollbacks", w, "count", s.rollbacks.count, "by_cause", s.rollbacks.by_cause, "recent",
                      s.rollbacks.recent));
  FR_TRY(fields(j, w, "last_exit", s.last_exit, "last_start", s.last_start, "start_paths", s.start_paths, "daemons",
                s.daemons, "memory", s.memory, "memory_utilization", s.memory_utilization, "engine_share_refused",
                s.engine_share_refused));
  if (auto it = j.find("arena_outcome"); it != j.end() && !it->is_null()) {
    ArenaOutcomeStatus a;
    FR_TRY(read_arena_outcome(*it, w + ".arena_outcome", a));
    s.arena_outcome = std::move(a);
  }
  FR_TRY(fields(j, w, "backoff_s", s.backoff_s, "failure", s.failure, "reload_in_progress", s.reload_in_progress));
  s.snapshot = j.value("snapshot", json(nullptr));
  if (auto it = j.find("standby"); it != j.end() && !it->is_null()) {
    StandbyStatus st;
    FR_TRY(read_standby(*it, w + ".standby", st));
    s.standby = std::move(st);
  }
  if (auto it = j.find("front"); it != j.end() && !it->is_null()) {
    FrontStatus f;
    FR_TRY(read_front(*it, w + ".front", f));
    s.front = std::move(f);
  }
  if (auto it = j.find("metrics"); it != j.end() && !it->is_null()) FR_TRY(read_metrics(*it, w + ".metrics", s.metrics));
  return s;
}

}  // namespace fr::status
