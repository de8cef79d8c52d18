#include "protocol/daemon_status.h"

#include "common/json_fields.h"

namespace fr::proto {

using nlohmann::json;
using json_fields::field;

namespace {

json record_json(const DaemonClientRecord& r, const char* mode_key) {
  return {{"pid", r.pid}, {"uid", r.uid}, {mode_key, r.mode}, {"unix_time", r.unix_time}};
}

}  // namespace

// Found by argument-dependent lookup from json_fields' vector reader.
static Status read_record(const json& j, const std::string& w, DaemonClientRecord& r, const char* mode_key) {
  FR_TRY(json_fields::object(j, w));
  FR_TRY(field(j, "pid", w, r.pid));
  FR_TRY(field(j, "uid", w, r.uid));
  FR_TRY(field(j, mode_key, w, r.mode));
  FR_TRY(field(j, "unix_time", w, r.unix_time));
  return {};
}

static Status read(const json& j, const std::string& w, DaemonClientRecord& r) { return read_record(j, w, r, "mode"); }

Status read_progress(const json& j, const std::string& w, DaemonProgress& p) {
  auto it = j.find("progress");
  if (it == j.end() || it->is_null()) return {};
  const std::string pw = w + ".progress";
  FR_TRY(json_fields::object(*it, pw));
  FR_TRY(field(*it, "done_bytes", pw, p.done_bytes));
  FR_TRY(field(*it, "total_bytes", pw, p.total_bytes));
  FR_TRY(field(*it, "elapsed_s", pw, p.elapsed_s));
  FR_TRY(field(*it, "rate_bytes_per_s", pw, p.rate_bytes_per_s));
  return {};
}

json to_json(const DaemonProgress& p) {
  json j{{"done_bytes", p.done_bytes}, {"total_bytes", p.total_bytes}, {"rate_bytes_per_s", p.rate_bytes_per_s}};
  if (p.elapsed_s) j["elapsed_s"] = *p.elapsed_s;
  return j;
}

static Status read(const json& j, const std::string& w, DaemonEntryStatus& e) {
  FR_TRY(json_fields::object(j, w));
  FR_TRY(field(j, "fingerprint", w, e.fingerprint));
  FR_TRY(field(j, "state", w, e.state));
  FR_TRY(field(j, "source", w, e.source));
  FR_TRY(field(j, "pool_bytes", w, e.pool_bytes));
  FR_TRY(field(j, "data_bytes", w, e.data_bytes));
  FR_TRY(field(j, "tensors", w, e.tensors));
  FR_TRY(field(j, "files", w, e.files));
  FR_TRY(field(j, "config", w, e.config));
  FR_TRY(field(j, "digest", w, e.digest));
  FR_TRY(field(j, "error", w, e.error));
  FR_TRY(read_progress(j, w, e.progress));
  FR_TRY(field(j, "attaches", w, e.attaches));
  return {};
}

static Status read_arena(const json& j, const std::string& w, DaemonArenaStatus& a, const char* wait_key) {
  FR_TRY(json_fields::object(j, w));
  FR_TRY(field(j, "name", w, a.name));
  FR_TRY(field(j, "bytes", w, a.bytes));
  FR_TRY(field(j, "pool_bytes", w, a.pool_bytes));
  FR_TRY(field(j, "holder_pid", w, a.holder_pid));
  FR_TRY(field(j, "leases", w, a.leases));
  FR_TRY(field(j, "generation", w, a.generation));
  FR_TRY(field(j, "waiting", w, a.waiting));
  FR_TRY(field(j, wait_key, w, a.last_wait_s));
  return {};
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
  return {{"name", a.name},
          {"bytes", a.bytes},
          {"pool_bytes", a.pool_bytes},
          {"holder_pid", a.holder_pid ? json(*a.holder_pid) : json(nullptr)},
          {"leases", a.leases},
          {"generation", a.generation},
          {"waiting", a.waiting},
          {wait_key, a.last_wait_s ? json(*a.last_wait_s) : json(nullptr)}};
}

json to_json(const DaemonStatus& s) {
  json entries = json::array();
  for (const auto& e : s.entries) {
    json at = json::array();
    for (const auto& a : e.attaches) at.push_back(record_json(a, "mode"));
    entries.push_back({{"fingerprint", e.fingerprint},
                       {"state", e.state},
                       {"source", e.source},
                       {"pool_bytes", e.pool_bytes},
                       {"data_bytes", e.data_bytes},
                       {"tensors", e.tensors},
                       {"files", e.files},
                       {"config", e.config},
                       {"digest", e.digest ? json(*e.digest) : json(nullptr)},
                       {"error", e.error ? json(*e.error) : json(nullptr)},
                       {"progress", to_json(e.progress)},
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
  FR_TRY(json_fields::object(j, w));
  FR_TRY(field(j, "backend", w, s.backend));
  FR_TRY(field(j, "gpu_uuid", w, s.gpu_uuid));
  FR_TRY(field(j, "gpu_name", w, s.gpu_name));
  FR_TRY(field(j, "pid", w, s.pid));
  FR_TRY(field(j, "held_bytes", w, s.held_bytes));
  FR_TRY(field(j, "clients", w, s.clients));
  FR_TRY(field(j, "stale_dropped", w, s.stale_dropped));
  FR_TRY(field(j, "entries", w, s.entries));
  FR_TRY(field(j, "arena_bytes", w, s.arena_bytes));
  FR_TRY(read_arenas(j, "arenas", w, s.arenas, "last_wait_s"));
  FR_TRY(read_list(j, "misses", w, s.misses,
                   [](const json& v, const std::string& vw, DaemonClientRecord& r) { return read_record(v, vw, r, "reason"); }));
  return s;
}

}  // namespace fr::proto
