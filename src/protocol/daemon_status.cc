#include "protocol/daemon_status.h"

#include "common/json_fields.h"

namespace fr::proto {

using nlohmann::json;
using json_fields::fields;

namespace {

json record_json(const DaemonClientRecord& r, const char* mode_key) {
  return {{"pid", r.pid}, {"uid", r.uid}, {mode_key, r.mode}, {"unix_time", r.unix_time}};
}

}  // namespace

// Found by argument-dependent lookup from json_fields' vector reader.
static Status read_record(const json& j, const std::string& w, DaemonClientRecord& r, const char* mode_key) {
  return fields(j, w, "pid", r.pid, "uid", r.uid, mode_key, r.mode, "unix_time", r.unix_time);
}

static Status read(const json& j, const std::string& w, DaemonClientRecord& r) { return read_record(j, w, r, "mode"); }

Status read_progress(const json& j, const std::string& w, DaemonProgress& p) {
  return json_fields::child_fields(j, "progress", w, "done_bytes", p.done_bytes, "total_bytes", p.total_bytes,
                                   "elapsed_s", p.elapsed_s, "rate_bytes_per_s", p.rate_bytes_per_s);
}

json to_json(const DaemonProgress& p) {
  json j{{"done_bytes", p.done_bytes}, {"total_bytes", p.total_bytes}, {"rate_bytes_per_s", p.rate_bytes_per_s}};
  if (p.elapsed_s) j["elapsed_s"] = *p.elapsed_s;
  return j;
}

static Status read(const json& j, const std::string& w, DaemonEntryStatus& e) {
  FR_TRY(fields(j, w, "fingerprint", e.fingerprint, "state", e.state, "source", e.source, "pool_bytes", e.pool_bytes,
                "data_bytes", e.data_bytes, "tensors", e.tensors, "files", e.files, "config", e.config, "digest",
                e.digest, "error", e.error));
  FR_TRY(read_progress(j, w, e.progress));
  return fields(j, w, "attaches", e.attaches);
}

static Status read_arena(const json& j, const std::string& w, DaemonArenaStatus& a, const char* wait_key) {
  return fields(j, w, "name", a.name, "bytes", a.bytes, "pool_bytes", a.pool_bytes, "holder_pid", a.holder_pid, "leases",
                a.leases, "generation", a.generation, "waiting", a.waiting, wait_key, a.last_wait_s);
}

// A list of objects read by `one` (absent or null: empty).
template <class T, class Read>
static Status read_list(const json& j, const char* key, const std::string& w, std::vector<T>& out, Read one) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  const std::string lw = w + "." + key;
  if (!it->is_array()) return json_fields::bad(lw, "not an array");
  out.clear();
  for (size_t i = 0; i < it->size(); ++i) {
    T t;
    FR_TRY(one((*it)[i], lw + "[" + std::to_string(i) + "]", t));
    out.push_back(std::move(t));
  }
  return {};
}

Status read_arenas(const json& j, const char* key, const std::string& w, std::vector<DaemonArenaStatus>& out,
                   const char* wait_key) {
  return read_list(j, key, w, out,
                   [&](const json& v, const std::string& vw, DaemonArenaStatus& a) { return read_arena(v, vw, a, wait_key); });
}

json to_json(const DaemonArenaStatus& a, const char* wait_key) {
  return {{"name", a.name}, {"bytes", a.bytes}, {"pool_bytes", a.pool_bytes},
          {"holder_pid", json_fields::or_null(a.holder_pid)}, {"leases", a.leases}, {"generation", a.generation},
          {"waiting", a.waiting}, {wait_key, json_fields::or_null(a.last_wait_s)}};
}

json to_json(const DaemonStatus& s) {
  json entries = json::array();
  for (const auto& e : s.entries) {
    json at = json::array();
    for (const auto& a : e.attaches) at.push_back(record_json(a, "mode"));
    entries.push_back({{"fingerprint", e.fingerprint}, {"state", e.state}, {"source", e.source},
                       {"pool_bytes", e.pool_bytes}, {"data_bytes", e.data_bytes}, {"tensors", e.tensors},
                       {"files", e.files}, {"config", e.config}, {"digest", json_fields::or_null(e.digest)},
                       {"error", json_fields::or_null(e.error)}, {"progress", to_json(e.progress)},
                       {"attaches", std::move(at)}});
  }
  json misses = json::array();
  for (const auto& m : s.misses) misses.push_back(record_json(m, "reason"));
  json arenas = json::array();
  for (const auto& a : s.arenas) arenas.push_back(to_json(a, "last_wait_s"));
  return {{"backend", s.backend}, {"gpu_uuid", s.gpu_uuid}, {"gpu_name", s.gpu_name}, {"pid", s.pid},
          {"held_bytes", s.held_bytes}, {"clients", s.clients}, {"stale_dropped", s.stale_dropped}, {"entries", std::move(entries)},
          {"misses", std::move(misses)}, {"arena_bytes", s.arena_bytes}, {"arenas", std::move(arenas)}};
}

Result<DaemonStatus> daemon_status_from_json(const json& j, const std::string& w) {
  DaemonStatus s;
  FR_TRY(fields(j, w, "backend", s.backend, "gpu_uuid", s.gpu_uuid, "gpu_name", s.gpu_name, "pid", s.pid, "held_bytes",
                s.held_bytes, "clients", s.clients, "stale_dropped", s.stale_dropped, "entries", s.entries,
                "arena_bytes", s.arena_bytes));
  FR_TRY(read_arenas(j, "arenas", w, s.arenas, "last_wait_s"));
  FR_TRY(read_list(j, "misses", w, s.misses,
                   [](const json& v, const std::string& vw, DaemonClientRecord& r) { return read_record(v, vw, r, "reason"); }));
  return s;
}

}  // namespace fr::proto
