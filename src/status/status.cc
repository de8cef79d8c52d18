#include "status/status.h"

#include "common/json_fields.h"

namespace fr::status {

using nlohmann::json;
using json_fields::field;
using json_fields::object;

// The readers below are found by argument-dependent lookup from json_fields' vector and map readers.

static Status read_arena_outcome(const json& j, const std::string& w, ArenaOutcomeStatus& a) {
  FR_TRY(object(j, w));
  FR_TRY(field(j, "outcome", w, a.outcome));
  FR_TRY(field(j, "pid", w, a.pid));
  FR_TRY(field(j, "unix_time", w, a.unix_time));
  FR_TRY(field(j, "name", w, a.name));
  FR_TRY(field(j, "bytes", w, a.bytes));
  FR_TRY(field(j, "waited_s", w, a.waited_s));
  FR_TRY(field(j, "swap_s", w, a.swap_s));
  FR_TRY(field(j, "generation", w, a.generation));
  FR_TRY(field(j, "reason", w, a.reason));
  return {};
}

static Status read(const json& j, const std::string& w, DaemonRowStatus& d) {
  FR_TRY(object(j, w));
  FR_TRY(field(j, "gpu", w, d.gpu));
  FR_TRY(field(j, "kind", w, d.kind));
  FR_TRY(field(j, "pid", w, d.pid));
  FR_TRY(field(j, "socket", w, d.socket));
  FR_TRY(field(j, "state", w, d.state));
  FR_TRY(field(j, "error", w, d.error));
  FR_TRY(field(j, "held_bytes", w, d.held_bytes));
  FR_TRY(field(j, "entries", w, d.entries));
  FR_TRY(field(j, "arena_bytes", w, d.arena_bytes));
  FR_TRY(proto::read_arenas(j, "arenas", w, d.arenas, "waited_s"));
  FR_TRY(proto::read_progress(j, w, d.progress));
  if (j.contains("health") || j.contains("argv") || j.contains("watched_files")) {
    PreloadDetails p;
    FR_TRY(field(j, "health", w, p.health));
    FR_TRY(field(j, "argv", w, p.argv));
    FR_TRY(field(j, "watched_files", w, p.watched_files));
    d.preload = std::move(p);
  }
  return {};
}

static Status read(const json& j, const std::string& w, MemoryRowStatus& m) {
  FR_TRY(object(j, w));
  FR_TRY(field(j, "gpu", w, m.gpu));
  FR_TRY(field(j, "error", w, m.error));
  if (m.error) return {};
  FR_TRY(field(j, "uuid", w, m.uuid));
  FR_TRY(field(j, "name", w, m.name));
  FR_TRY(field(j, "total_bytes", w, m.total_bytes));
  FR_TRY(field(j, "used_bytes", w, m.used_bytes));
  FR_TRY(field(j, "free_bytes", w, m.free_bytes));
  FR_TRY(field(j, "budget_bytes", w, m.budget_bytes));
  FR_TRY(field(j, "daemon_held_bytes", w, m.daemon_held_bytes));
  FR_TRY(field(j, "standby_reserve_bytes", w, m.standby_reserve_bytes));
  FR_TRY(field(j, "engine_share", w, m.engine_share));
  FR_TRY(field(j, "arena_bytes", w, m.arena_bytes));
  FR_TRY(field(j, "engine_share_bytes", w, m.engine_share_bytes));
  FR_TRY(field(j, "engine_own_bytes", w, m.engine_own_bytes));
  return {};
}

static Status read(const json& j, const std::string& w, StartAttemptStatus& a) {
  FR_TRY(object(j, w));
  FR_TRY(field(j, "path", w, a.path));
  FR_TRY(field(j, "outcome", w, a.outcome));
  FR_TRY(field(j, "reason", w, a.reason));
  FR_TRY(field(j, "detail", w, a.detail));
  return {};
}

static Status read(const json& j, const std::string& w, LastExitStatus& e) {
  FR_TRY(object(j, w));
  FR_TRY(json_fields::required(j, "cause", w, e.cause));
  FR_TRY(field(j, "detail", w, e.detail));
  FR_TRY(field(j, "unix_time", w, e.unix_time));
  FR_TRY(field(j, "pid", w, e.pid));
  FR_TRY(field(j, "uptime_s", w, e.uptime_s));
  FR_TRY(field(j, "died_at_s", w, e.died_at_s));
  FR_TRY(field(j, "was_ready", w, e.was_ready));
  return {};
}

static Status read(const json& j, const std::string& w, LastStartStatus& s) {
  FR_TRY(object(j, w));
  FR_TRY(json_fields::required(j, "path", w, s.path));
  FR_TRY(field(j, "time_to_ready_s", w, s.time_to_ready_s));
  FR_TRY(field(j, "since_previous_exit_s", w, s.since_previous_exit_s));
  FR_TRY(field(j, "ready_at_s", w, s.ready_at_s));
  FR_TRY(field(j, "unix_time", w, s.unix_time));
  FR_TRY(field(j, "pid", w, s.pid));
  FR_TRY(field(j, "start_paths", w, s.start_paths));
  FR_TRY(field(j, "snapshot_id", w, s.snapshot_id));
  FR_TRY(field(j, "expected", w, s.expected));
  FR_TRY(field(j, "warm_miss", w, s.warm_miss));
  FR_TRY(field(j, "standby_level", w, s.standby_level));
  return {};
}

static Status read(const json& j, const std::string& w, StartPathCount& c) {
  FR_TRY(object(j, w));
  FR_TRY(field(j, "path", w, c.path));
  FR_TRY(field(j, "outcome", w, c.outcome));
  FR_TRY(field(j, "reason", w, c.reason));
  FR_TRY(field(j, "count", w, c.count));
  return {};
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
  FR_TRY(field(j, "count", w, h.count));
  FR_TRY(field(j, "sum", w, h.sum));
  return {};
}

static Status read_standby(const json& j, const std::string& w, StandbyStatus& s) {
  FR_TRY(object(j, w));
  FR_TRY(field(j, "state", w, s.state));
  FR_TRY(field(j, "level", w, s.level));
  FR_TRY(field(j, "pid", w, s.pid));
  FR_TRY(field(j, "age_s", w, s.age_s));
  FR_TRY(field(j, "gpu_bytes", w, s.gpu_bytes));
  FR_TRY(field(j, "reserve_bytes", w, s.reserve_bytes));
  FR_TRY(field(j, "spawns", w, s.spawns));
  FR_TRY(field(j, "releases", w, s.releases));
  FR_TRY(field(j, "failures", w, s.failures));
  FR_TRY(field(j, "disabled", w, s.disabled));
  FR_TRY(field(j, "last_failure", w, s.last_failure));
  FR_TRY(field(j, "failures_in_row", w, s.failures_in_row));
  FR_TRY(field(j, "backoff_s", w, s.backoff_s));
  if (auto it = j.find("last_release"); it != j.end() && !it->is_null()) {
    const std::string lw = w + ".last_release";
    FR_TRY(object(*it, lw));
    FR_TRY(field(*it, "death_to_release_s", lw, s.death_to_release_s));
    FR_TRY(field(*it, "release_to_ready_s", lw, s.release_to_ready_s));
    FR_TRY(field(*it, "death_to_ready_s", lw, s.death_to_ready_s));
  }
  return {};
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
  FR_TRY(object(j, w));
  FR_TRY(field(j, "state", w, f.state));
  FR_TRY(field(j, "pid", w, f.pid));
  FR_TRY(field(j, "upstream", w, f.upstream));
  FR_TRY(field(j, "restarts", w, f.restarts));
  FR_TRY(field(j, "last_exit", w, f.last_exit));
  FR_TRY(field(j, "connections", w, f.connections));
  if (auto it = j.find("requests"); it != j.end() && !it->is_null()) {
    const std::string rw = w + ".requests";
    auto& r = f.requests;
    FR_TRY(object(*it, rw));
    FR_TRY(field(*it, "received", rw, r.received));
    FR_TRY(field(*it, "answered", rw, r.answered));
    FR_TRY(field(*it, "held", rw, r.held));
    FR_TRY(field(*it, "held_now", rw, r.held_now));
    FR_TRY(field(*it, "resent", rw, r.resent));
    FR_TRY(field(*it, "continued", rw, r.continued));
    FR_TRY(field(*it, "lost", rw, r.lost));
    FR_TRY(field(*it, "rejected", rw, r.rejected));
    FR_TRY(field(*it, "failed", rw, r.failed));
  }
  return {};
}

json to_json(const FrontStatus& f) {
  const auto& r = f.requests;
  return {{"state", f.state},
          {"pid", f.pid},
          {"upstream", f.upstream},
          {"restarts", f.restarts},
          {"last_exit", f.last_exit},
          {"connections", f.connections},
          {"requests",
           {{"received", r.received}, {"answered", r.answered}, {"held", r.held}, {"held_now", r.held_now},
            {"resent", r.resent}, {"continued", r.continued}, {"lost", r.lost}, {"rejected", json(r.rejected)},
            {"failed", json(r.failed)}}}};
}

static Status read_metrics(const json& j, const std::string& w, MetricsStatus& m) {
  FR_TRY(object(j, w));
  FR_TRY(field(j, "time_to_ready", w, m.time_to_ready));
  if (auto it = j.find("attaches"); it != j.end() && !it->is_null()) {
    const std::string aw = w + ".attaches";
    FR_TRY(object(*it, aw));
    FR_TRY(field(*it, "hit", aw, m.attaches_hit));
    FR_TRY(field(*it, "fallback", aw, m.attaches_fallback));
    FR_TRY(field(*it, "none", aw, m.attaches_none));
    FR_TRY(field(*it, "miss", aw, m.attach_misses));
  }
  if (auto it = j.find("reloads"); it != j.end() && !it->is_null()) {
    const std::string rw = w + ".reloads";
    FR_TRY(object(*it, rw));
    FR_TRY(field(*it, "warm", rw, m.reloads_warm));
    FR_TRY(field(*it, "cold", rw, m.reloads_cold));
    FR_TRY(field(*it, "rolled_back", rw, m.reloads_rolled_back));
  }
  FR_TRY(field(j, "start_paths", w, m.start_paths));
  FR_TRY(field(j, "rollbacks", w, m.rollbacks));
  if (auto it = j.find("snapshots"); it != j.end() && !it->is_null()) {
    const std::string sw = w + ".snapshots";
    SnapshotCounts c;
    FR_TRY(object(*it, sw));
    FR_TRY(field(*it, "created", sw, c.created));
    FR_TRY(field(*it, "create_failures", sw, c.create_failures));
    FR_TRY(field(*it, "restored", sw, c.restored));
    FR_TRY(field(*it, "fallbacks", sw, c.fallbacks));
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
  json j{{"gpu", d.gpu},
         {"pid", d.pid},
         {"state", d.state},
         {"error", d.error},
         {"held_bytes", d.held_bytes},
         {"entries", d.entries},
         {"progress", proto::to_json(d.progress)}};
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
  if (e.pid) j["pid"] = *e.pid;
  if (e.uptime_s) j["uptime_s"] = *e.uptime_s;
  if (e.died_at_s) j["died_at_s"] = *e.died_at_s;
  if (e.was_ready) j["was_ready"] = *e.was_ready;
  return j;
}

json to_json(const LastStartStatus& s) {
  json attempts = json::array();
  for (const auto& a : s.start_paths) attempts.push_back(to_json(a));
  json j{{"path", s.path}, {"time_to_ready_s", s.time_to_ready_s}, {"since_previous_exit_s", s.since_previous_exit_s},
         {"ready_at_s", s.ready_at_s}, {"unix_time", s.unix_time}, {"pid", s.pid}, {"start_paths", attempts}};
  for (const auto& [key, value] : {std::pair{"snapshot_id", &s.snapshot_id}, std::pair{"expected", &s.expected},
                                   std::pair{"warm_miss", &s.warm_miss}, std::pair{"standby_level", &s.standby_level}})
    if (*value) j[key] = **value;
  return j;
}

namespace {

json to_json(const MemoryRowStatus& m) {
  if (m.error) return {{"gpu", m.gpu}, {"error", *m.error}};
  json j = {{"gpu", m.gpu}, {"uuid", m.uuid}, {"name", m.name}, {"total_bytes", m.total_bytes},
            {"used_bytes", m.used_bytes}, {"free_bytes", m.free_bytes}, {"budget_bytes", m.budget_bytes},
            {"daemon_held_bytes", m.daemon_held_bytes}, {"standby_reserve_bytes", m.standby_reserve_bytes}};
  j["arena_bytes"] = m.arena_bytes;
  if (m.engine_share) j["engine_share"] = *m.engine_share;
  if (m.engine_share_bytes) j["engine_share_bytes"] = *m.engine_share_bytes;
  if (m.engine_own_bytes) j["engine_own_bytes"] = *m.engine_own_bytes;
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
  return {{"name", s.name},
          {"config", s.config},
          {"state", s.state},
          {"status_text", s.status_text},
          {"uptime_s", s.uptime_s},
          {"engine", engine},
          {"flags", s.flags},
          {"restarts", json(s.restarts)},
          {"rollbacks", {{"count", s.rollbacks.count}, {"by_cause", json(s.rollbacks.by_cause)}, {"recent", recent}}},
          {"last_exit", s.last_exit ? to_json(*s.last_exit) : json(nullptr)},
          {"last_start", s.last_start ? to_json(*s.last_start) : json(nullptr)},
          {"start_paths", attempts},
          {"daemons", daemons},
          {"memory", memory},
          {"memory_utilization", s.memory_utilization},
          {"engine_share_refused", s.engine_share_refused ? json(*s.engine_share_refused) : json(nullptr)},
          {"arena_outcome", s.arena_outcome ? to_json(*s.arena_outcome) : json(nullptr)},
          {"backoff_s", s.backoff_s},
          {"failure", s.failure},
          {"reload_in_progress", s.reload_in_progress},
          {"snapshot", s.snapshot},
          {"standby", s.standby ? to_json(*s.standby) : json(nullptr)},
          {"front", s.front ? to_json(*s.front) : json(nullptr)},
          {"metrics", to_json(s.metrics)}};
}

Result<SupervisorStatus> supervisor_status_from_json(const json& j, const std::string& w) {
  SupervisorStatus s;
  FR_TRY(object(j, w));
  FR_TRY(field(j, "name", w, s.name));
  FR_TRY(field(j, "config", w, s.config));
  FR_TRY(field(j, "state", w, s.state));
  FR_TRY(field(j, "status_text", w, s.status_text));
  FR_TRY(field(j, "uptime_s", w, s.uptime_s));
  if (auto it = j.find("engine"); it != j.end() && !it->is_null()) {
    const std::string ew = w + ".engine";
    EngineStatus e;
    FR_TRY(object(*it, ew));
    FR_TRY(field(*it, "pid", ew, e.pid));
    FR_TRY(field(*it, "uptime_s", ew, e.uptime_s));
    FR_TRY(field(*it, "path", ew, e.path));
    FR_TRY(field(*it, "snapshot_id", ew, e.snapshot_id));
    FR_TRY(field(*it, "flags", ew, e.flags));
    FR_TRY(field(*it, "running", ew, e.running));
    FR_TRY(field(*it, "readiness_endpoint", ew, e.readiness_endpoint));
    if (auto v = it->find("vllm"); v != it->end()) {
      if (!v->is_object() && !v->is_null()) return json_fields::bad(ew + ".vllm", "not an object");
      e.vllm = *v;
    }
    s.engine = std::move(e);
  }
  FR_TRY(field(j, "flags", w, s.flags));
  FR_TRY(field(j, "restarts", w, s.restarts));
  if (auto it = j.find("rollbacks"); it != j.end() && !it->is_null()) {
    const std::string rw = w + ".rollbacks";
    FR_TRY(object(*it, rw));
    FR_TRY(field(*it, "count", rw, s.rollbacks.count));
    FR_TRY(field(*it, "by_cause", rw, s.rollbacks.by_cause));
    FR_TRY(field(*it, "recent", rw, s.rollbacks.recent));
  }
  FR_TRY(field(j, "last_exit", w, s.last_exit));
  FR_TRY(field(j, "last_start", w, s.last_start));
  FR_TRY(field(j, "start_paths", w, s.start_paths));
  FR_TRY(field(j, "daemons", w, s.daemons));
  FR_TRY(field(j, "memory", w, s.memory));
  FR_TRY(field(j, "memory_utilization", w, s.memory_utilization));
  FR_TRY(field(j, "engine_share_refused", w, s.engine_share_refused));
  if (auto it = j.find("arena_outcome"); it != j.end() && !it->is_null()) {
    ArenaOutcomeStatus a;
    FR_TRY(read_arena_outcome(*it, w + ".arena_outcome", a));
    s.arena_outcome = std::move(a);
  }
  FR_TRY(field(j, "backoff_s", w, s.backoff_s));
  FR_TRY(field(j, "failure", w, s.failure));
  FR_TRY(field(j, "reload_in_progress", w, s.reload_in_progress));
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
