// render_metrics: the status JSON as Prometheus text format 0.0.4. The families and their labels are listed
// in docs/health.md; keep the two in step.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "health/health_server.h"
#include "status/kv_cache_status.h"
#include "status/status.h"

namespace fr::health {
namespace {

using nlohmann::json;
using Labels = std::vector<std::pair<std::string, std::string>>;

constexpr size_t kMaxReasonChars = 80;

// ---- reading the status JSON without ever throwing ----

const json& field(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::string text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_number()) return j.dump();
  return {};
}

// ---- the exposition format ----

// Go's strconv-style value: integers exactly, NaN and infinities spelled as Prometheus parses them.
std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Whole numbers below 2^53 are exact in a double: print them as integers (1500000000, not 1.5e+09).
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) return std::to_string(static_cast<int64_t>(v));
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string escape_label(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// Valid UTF-8 of at most `max` code points: invalid bytes become U+FFFD and the cut falls on a code point
// boundary. Prometheus rejects a scrape with a label value that is not valid UTF-8, and status strings can
// carry raw bytes from a child's output.
std::string sanitize_utf8(const std::string& s, size_t max = std::string::npos) {
  std::string out;
  size_t chars = 0, i = 0;
  while (i < s.size() && chars < max) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 && c >= 0xc2 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 && c <= 0xf4 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\xef\xbf\xbd";
      ++i;
    }
    ++chars;
  }
  return out;
}

class Writer {
 public:
  // Starts a family. Each name is started once; its samples follow immediately.
  void family(const std::string& name, const char* type, const char* help) {
    m_name = "fastrestart_" + name;
    m_out += "# HELP " + m_name + " " + help + "\n";
    m_out += "# TYPE " + m_name + " " + type + "\n";
  }
  void sample(const Labels& labels, const std::string& value, const char* suffix = "") {
    m_out += m_name;
    m_out += suffix;
    if (!labels.empty()) {
      m_out += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        if (i) m_out += ',';
        m_out += labels[i].first + "=\"" + escape_label(sanitize_utf8(labels[i].second)) + '"';
      }
      m_out += '}';
    }
    m_out += ' ' + value + '\n';
  }
  void sample(const Labels& labels, double value) { sample(labels, format_value(value)); }
  // A family of one sample without labels.
  void single(const std::string& name, const char* type, const char* help, double value) {
    family(name, type, help);
    sample({}, value);
  }
  std::string take() { return std::move(m_out); }

 private:
  std::string m_name;
  std::string m_out;
};

constexpr const char* kStates[] = {"loading", "starting", "ready", "draining", "backoff",
                                   "held",    "stopping", "failed", "stopped"};

using status::SupervisorStatus;

std::string count(uint64_t n) { return std::to_string(n); }

void supervisor_families(Writer& w, const SupervisorStatus& status, const std::string& version) {
  const std::string& state = status.state;
  w.single("engine_up", "gauge", "1 while the engine is ready (passed its readiness request), else 0.",
           state == "ready" ? 1.0 : 0.0);

  w.family("state", "gauge", "The supervisor's lifecycle state: 1 for the current one, 0 for the others.");
  bool known = false;
  for (const char* s : kStates) {
    known = known || state == s;
    w.sample({{"state", s}}, state == s ? 1.0 : 0.0);
  }
  if (!known && !state.empty()) w.sample({{"state", state}}, 1.0);

  w.single("reload_in_progress", "gauge", "1 while a pushed config (reload) is being applied.",
           status.reload_in_progress ? 1.0 : 0.0);

  w.family("restarts_total", "counter", "Engine restarts by cause (crash, kernel_oom, cuda_oom, hung, ...).");
  for (const auto& [cause, n] : status.restarts) w.sample({{"cause", cause}}, count(n));

  w.single("backoff_seconds", "gauge", "The current delay before the next engine start after a failure.",
           status.backoff_s);

  w.single("uptime_seconds", "gauge", "Seconds since fastrestartd started.", status.uptime_s);

  w.family("engine_uptime_seconds", "gauge", "Seconds since the current engine process was spawned.");
  if (status.engine) w.sample({}, status.engine->uptime_s);

  w.family("build_info", "gauge", "Always 1; the version label is fastrestartd's version.");
  w.sample({{"version", version}}, 1.0);
}

// One histogram per path. Buckets are sorted by le and made cumulative-monotonic; +Inf is the larger of
// count and the last bucket, and _count equals it.
void time_to_ready(Writer& w, const status::MetricsStatus& metrics) {
  w.family("time_to_ready_seconds", "histogram",
           "Seconds from engine spawn (a standby: its release) to a passed readiness request, by path (cold, warm, snapshot, standby).");
  for (const auto& [path, h] : metrics.time_to_ready) {
    std::vector<std::pair<double, double>> buckets;
    for (const auto& [le, n] : h.buckets)
      if (!std::isnan(le) && !std::isinf(le)) buckets.emplace_back(le, static_cast<double>(n));
    std::stable_sort(buckets.begin(), buckets.end(), [](auto& a, auto& c) { return a.first < c.first; });
    double running = 0;
    std::vector<std::pair<double, double>> clean;
    for (const auto& [le, n] : buckets) {
      running = std::max(running, n);
      if (!clean.empty() && clean.back().first == le) clean.back().second = running;
      else clean.emplace_back(le, running);
    }
    const double total = std::max(running, static_cast<double>(h.count));
    for (const auto& [le, n] : clean) w.sample({{"path", path}, {"le", format_value(le)}}, format_value(n), "_bucket");
    w.sample({{"path", path}, {"le", "+Inf"}}, format_value(total), "_bucket");
    w.sample({{"path", path}}, format_value(h.sum), "_sum");
    w.sample({{"path", path}}, format_value(total), "_count");
  }
}

void attaches_and_reloads(Writer& w, const status::MetricsStatus& m) {
  w.family("weight_attaches_total", "counter",
           "Engine weight attaches by result: hit (served from the daemons' cache), miss (by reason), "
           "fallback (loaded from disk), none (no attach reported).");
  w.sample({{"result", "hit"}}, count(m.attaches_hit));
  // Reasons are free text: truncated ones that collide are summed so each label set appears once.
  std::vector<std::pair<std::string, uint64_t>> reasons;
  for (const auto& [reason, n] : m.attach_misses) {
    std::string r = sanitize_utf8(reason, kMaxReasonChars);
    auto it = std::find_if(reasons.begin(), reasons.end(), [&](auto& p) { return p.first == r; });
    if (it == reasons.end()) reasons.emplace_back(std::move(r), n);
    else it->second += n;
  }
  for (const auto& [r, n] : reasons) w.sample({{"result", "miss"}, {"reason", r}}, count(n));
  w.sample({{"result", "fallback"}}, count(m.attaches_fallback));
  w.sample({{"result", "none"}}, count(m.attaches_none));

  w.family("reloads_total", "counter", "Config pushes (reloads) by result: warm, cold, rolled_back.");
  w.sample({{"result", "warm"}}, count(m.reloads_warm));
  w.sample({{"result", "cold"}}, count(m.reloads_cold));
  w.sample({{"result", "rolled_back"}}, count(m.reloads_rolled_back));

  // Rolled-back pushes by the exit cause of the engine that ran the rejected flags; they are not engine
  // failures of the running configuration, so fastrestart_restarts_total does not count them.
  if (!m.rollbacks.empty()) {
    w.family("reload_rollbacks_total", "counter", "Rolled-back config pushes by the exit cause of the engine that ran them.");
    for (const auto& [cause, n] : m.rollbacks) w.sample({{"cause", sanitize_utf8(cause, kMaxReasonChars)}}, count(n));
  }
}

// Each start path asked at an engine start, by outcome (started, skipped, failed, waiting) and reason code.
void start_path_families(Writer& w, const status::MetricsStatus& m) {
  if (m.start_paths.empty()) return;
  w.family("start_path_total", "counter",
           "Start paths asked at engine starts (restart.start, in order) by outcome and reason: started, skipped "
           "(could not serve), failed (tried, the next path ran), waiting (reloading the daemons first).");
  for (const auto& row : m.start_paths)
    w.sample({{"path", sanitize_utf8(row.path, kMaxReasonChars)},
              {"outcome", sanitize_utf8(row.outcome, kMaxReasonChars)},
              {"reason", sanitize_utf8(row.reason, kMaxReasonChars)}},
             count(row.count));
}

// Only for supervisors that report snapshots (status "metrics.snapshots"; docs/snapshot.md).
void snapshot_families(Writer& w, const status::MetricsStatus& m) {
  if (!m.snapshots) return;
  const auto& sn = *m.snapshots;
  w.family("snapshot_restores_total", "counter",
           "Engine starts from a CRIU snapshot by result: restored (oracle matched), fallback (refused or failed; "
           "the next start path ran).");
  w.sample({{"result", "restored"}}, count(sn.restored));
  w.sample({{"result", "fallback"}}, count(sn.fallbacks));
  w.family("snapshot_creates_total", "counter", "Snapshot creations by result: created, failed.");
  w.sample({{"result", "created"}}, count(sn.created));
  w.sample({{"result", "failed"}}, count(sn.create_failures));
}

void daemon_families(Writer& w, const SupervisorStatus& status) {
  std::vector<std::pair<std::string, const status::DaemonRowStatus*>> ds;
  for (size_t i = 0; i < status.daemons.size(); ++i) {
    const auto& d = status.daemons[i];
    ds.emplace_back(d.gpu.empty() ? std::to_string(i) : d.gpu, &d);
  }
  w.family("daemon_up", "gauge", "1 while the GPU's weight daemon runs (state ready or loading), else 0.");
  for (const auto& [gpu, d] : ds) w.sample({{"gpu", gpu}}, d->state == "ready" || d->state == "loading" ? 1.0 : 0.0);
  w.family("daemon_held_bytes", "gauge", "Bytes of weights the GPU's daemon holds.");
  for (const auto& [gpu, d] : ds) w.sample({{"gpu", gpu}}, count(d->held_bytes));
  w.family("daemon_entries", "gauge", "Entries (checkpoints) the GPU's daemon holds.");
  for (const auto& [gpu, d] : ds) w.sample({{"gpu", gpu}}, count(d->entries));
  w.family("daemon_load_progress_ratio", "gauge",
           "Preload progress of the GPU's daemon, done/total bytes (1 when ready with nothing to preload).");
  for (const auto& [gpu, d] : ds) {
    const double done = static_cast<double>(d->progress.done_bytes), total = static_cast<double>(d->progress.total_bytes);
    w.sample({{"gpu", gpu}}, total > 0 ? std::clamp(done / total, 0.0, 1.0) : (d->state == "ready" ? 1.0 : 0.0));
  }
  w.family("daemon_load_rate_bytes_per_second", "gauge", "Current preload throughput of the GPU's daemon.");
  for (const auto& [gpu, d] : ds) w.sample({{"gpu", gpu}}, d->progress.rate_bytes_per_s);
}

// KV arenas (docs/supervisor.md, "KV arenas"): each native daemon's arenas by GPU and name, and what the
// current (or last) engine said of its own. Families without an arena keep their HELP and TYPE lines.
void arena_families(Writer& w, const SupervisorStatus& status) {
  std::vector<std::pair<Labels, const status::ArenaStatus*>> as;
  for (size_t i = 0; i < status.daemons.size(); ++i) {
    const auto& d = status.daemons[i];
    for (const auto& a : d.arenas) as.push_back({{{"gpu", d.gpu.empty() ? std::to_string(i) : d.gpu}, {"name", a.name}}, &a});
  }
  w.family("arena_bytes", "gauge",
           "GPU memory a daemon's KV arena holds (allocated): the engine's KV cache, counted inside its share.");
  for (const auto& [l, a] : as) w.sample(l, count(a->pool_bytes));
  w.family("arena_leases_total", "counter", "Leases granted on the arena since the daemon made it.");
  for (const auto& [l, a] : as) w.sample(l, count(a->leases));
  w.family("arena_generation", "gauge", "The arena's last lease's generation (1 for a new arena).");
  for (const auto& [l, a] : as) w.sample(l, count(a->generation));
  w.family("arena_held", "gauge", "1 while a process holds the arena's lease, else 0.");
  for (const auto& [l, a] : as) w.sample(l, a->holder_pid ? 1.0 : 0.0);
  w.family("arena_lease_wait_seconds", "gauge",
           "The arena's last lease's wait for its previous holder's exit (no sample until a lease waited).");
  for (const auto& [l, a] : as)
    if (a->last_wait_s) w.sample(l, *a->last_wait_s);
  w.family("engine_arena_outcome", "gauge",
           "1, labelled with what the current (or last) engine said of its KV arena as it started: leased or fallback.");
  if (status.arena_outcome) w.sample({{"outcome", status.arena_outcome->outcome == "leased" ? "leased" : "fallback"}}, 1.0);
}

// The current engine's KV cache survival (docs/kv-survival.md, "In fastrestartd's status"): what it recovered
// from its KV arena and dropped at its start, and its prefix cache's hits since. No samples while no engine
// said (status kv_cache null); the counters start again at each engine.
void kv_cache_families(Writer& w, const json& status_json) {
  std::optional<status::KvCacheStatus> decoded;
  if (const json& j = field(status_json, "kv_cache"); !j.is_null()) {
    status::KvCacheStatus kv;
    if (auto r = status::read_kv_cache_status(j, "status.kv_cache", kv); r.ok()) decoded = std::move(kv);
    else spdlog::warn("/metrics: {}", r.error().message);
  }
  const status::KvCacheStatus* k = decoded ? &*decoded : nullptr;
  w.family("engine_kv_blocks", "gauge", "Blocks of the engine's KV cache (its capacity), labelled with where it lives: arena or private.");
  if (k) w.sample({{"location", k->location}}, count(k->blocks));
  w.family("engine_kv_header", "gauge",
           "1, labelled with what the engine found in its KV arena's header at its start: empty, valid, or the mismatch that dropped the index.");
  if (k) w.sample({{"header", k->header}}, 1.0);
  w.family("engine_kv_blocks_recovered", "gauge", "KV cache blocks the engine kept from its arena at its start (after a restart).");
  if (k) w.sample({}, count(k->recovered));
  w.family("engine_kv_blocks_dropped", "gauge", "KV cache blocks the engine dropped at its start, by reason.");
  if (k)
    for (const auto& [reason, n] : k->dropped_by) w.sample({{"reason", reason}}, count(n));
  w.family("engine_kv_prefix_requests_total", "counter", "Requests that looked up the engine's prefix cache.");
  if (k) w.sample({}, count(k->requests));
  w.family("engine_kv_prefix_query_tokens_total", "counter", "Prompt tokens looked up in the engine's prefix cache.");
  if (k) w.sample({}, count(k->query_tokens));
  w.family("engine_kv_prefix_hit_tokens_total", "counter", "Prompt tokens found in the engine's prefix cache (not recomputed).");
  if (k) w.sample({}, count(k->hit_tokens));
  w.family("engine_kv_prefix_hit_rate", "gauge", "hit_tokens / query_tokens since the engine started (no sample before a query).");
  if (k)
    if (auto r = k->hit_rate()) w.sample({}, *r);
}

void memory_families(Writer& w, const SupervisorStatus& status) {
  std::vector<std::pair<std::string, const status::MemoryRowStatus*>> ms;
  for (size_t i = 0; i < status.memory.size(); ++i) {
    const auto& m = status.memory[i];
    if (m.error) continue;  // NVML could not read this GPU
    ms.emplace_back(m.gpu.empty() ? std::to_string(i) : m.gpu, &m);
  }
  struct Family { const char* name; uint64_t status::MemoryRowStatus::*value; const char* help; };
  static constexpr Family kFamilies[] = {
      {"gpu_memory_total_bytes", &status::MemoryRowStatus::total_bytes, "The GPU's memory size."},
      {"gpu_memory_used_bytes", &status::MemoryRowStatus::used_bytes, "GPU memory in use (every process, the daemons included)."},
      {"gpu_memory_free_bytes", &status::MemoryRowStatus::free_bytes, "GPU memory free."},
      {"gpu_memory_budget_bytes", &status::MemoryRowStatus::budget_bytes, "GPU memory the model may use (memory.utilization x total)."},
      {"gpu_standby_reserve_bytes", &status::MemoryRowStatus::standby_reserve_bytes,
       "GPU memory the engine's share leaves for a warmed standby on this GPU (measured at its last park, or standby.reserve_mib)."},
      {"gpu_arena_bytes", &status::MemoryRowStatus::arena_bytes,
       "GPU memory the daemon's KV arenas hold on this GPU: the engine's KV cache, inside its share, not held outside it."},
  };
  for (const auto& f : kFamilies) {
    w.family(f.name, "gauge", f.help);
    for (const auto& [gpu, m] : ms) w.sample({{"gpu", gpu}}, count(m->*f.value));
  }
  w.family("gpu_engine_memory_share_ratio", "gauge",
           "The engine's share of the GPU's memory (what its rank there is given; the daemon's pool and a standby's reserve aside).");
  for (const auto& [gpu, m] : ms)
    if (m->engine_share) w.sample({{"gpu", gpu}}, *m->engine_share);
  w.family("gpu_engine_memory_share_bytes", "gauge",
           "The engine's share of the GPU in bytes (total x share, exactly), its KV arenas included.");
  for (const auto& [gpu, m] : ms)
    if (m->engine_share_bytes) w.sample({{"gpu", gpu}}, count(*m->engine_share_bytes));
}

// engine.kind = "vllm": what the engine reported about itself, and the loader plugin's attach times
// (docs/vllm.md, "What the supervisor reads"). Absent for other engines. The report's shape is the vLLM
// adapter's (VllmReport), so it is read here leniently, field by field.
void vllm_families(Writer& w, const SupervisorStatus& status) {
  if (!status.engine) return;
  const json& v = status.engine->vllm;
  if (!v.is_object()) return;
  w.family("vllm_info", "gauge", "Always 1 while a vLLM engine runs; labels: the version and model runner it reported.");
  w.sample({{"version", sanitize_utf8(text(field(field(v, "version"), "value")), kMaxReasonChars)},
            {"model_runner", sanitize_utf8(text(field(field(v, "model_runner"), "value")), kMaxReasonChars)}},
           1.0);
  w.family("loader_attach_seconds", "gauge",
           "The fastrestart vLLM loader's attach time per rank at the engine's start (its result line).");
  const json& loader = field(v, "loader");
  if (!loader.is_array()) return;
  for (size_t i = 0; i < loader.size(); ++i) {
    const std::string ms = text(field(loader[i], "attach_ms"));
    char* end = nullptr;
    const double x = std::strtod(ms.c_str(), &end);
    if (ms.empty() || end == ms.c_str() || *end != 0) continue;  // "-": not an attach
    // One line per rank, in the order they came (tp alone may repeat across data-parallel ranks).
    w.sample({{"line", std::to_string(i)}, {"result", sanitize_utf8(text(field(loader[i], "result")), kMaxReasonChars)}},
             x / 1000.0);
  }
}

// Only for supervisors with a standby path (status "standby"; docs/standby.md).
void standby_families(Writer& w, const SupervisorStatus& status) {
  if (!status.standby) return;
  const auto& s = *status.standby;
  w.family("standby_parked", "gauge", "1 while a standby engine is parked at its gate, else 0.");
  w.sample({{"level", s.level}}, s.state == "parked" ? 1.0 : 0.0);
  w.single("standby_spawns_total", "counter", "Standby engines started.", static_cast<double>(s.spawns));
  w.single("standby_releases_total", "counter", "Standby engines released to become the engine.",
           static_cast<double>(s.releases));
  w.family("standby_failures_total", "counter",
           "Standby engines that failed, by reason: never_parked, died, listening, protocol, release, spawn.");
  for (const auto& [reason, n] : s.failures) w.sample({{"reason", sanitize_utf8(reason, kMaxReasonChars)}}, static_cast<double>(n));
  w.single("standby_gpu_bytes", "gauge",
           "GPU memory the parked standby holds (used after its park minus before it started).",
           static_cast<double>(s.gpu_bytes));
  w.single("standby_reserve_bytes", "gauge", "GPU memory the engine's budget leaves for a warmed standby.",
           static_cast<double>(s.reserve_bytes));
  w.single("standby_age_seconds", "gauge", "Seconds since the current standby was started (0: none runs).", s.age_s);
  w.family("standby_disabled", "gauge", "1 while the standby path is off after failures (until the flags change).");
  w.sample({}, s.disabled.empty() ? 0.0 : 1.0);
  if (s.release_to_ready_s) {
    w.single("standby_release_to_ready_seconds", "gauge",
             "Seconds from the last release to a passed readiness request.",
             *s.release_to_ready_s);
  }
}

// Only with engine.listen = "front" (status "front"; docs/front.md, "Status").
void front_families(Writer& w, const SupervisorStatus& status) {
  if (!status.front) return;
  const auto& f = *status.front;
  const auto& r = f.requests;
  auto n = [](uint64_t v) { return static_cast<double>(v); };
  w.single("front_up", "gauge", "1 while fastrestart-front runs, else 0 (between a death and its restart, or stopped).",
           f.pid > 0 ? 1.0 : 0.0);
  w.single("front_restarts_total", "counter",
           "fastrestart-front processes started again after an exit fastrestartd did not ask for.",
           n(f.restarts));
  w.single("front_connections", "gauge", "Client connections the front holds open now.", n(f.connections));
  w.single("front_requests_received_total", "counter", "Complete requests the fronts read from clients.",
           n(r.received));
  w.family("front_requests_total", "counter",
           "Requests the fronts finished, by outcome: answered (by an engine), rejected (by the front: bad requests), "
           "failed (the engine did not answer, by reason), lost (inside a front that died).");
  w.sample({{"outcome", "answered"}, {"reason", ""}}, n(r.answered));
  for (const auto& [code, v] : r.rejected)
    w.sample({{"outcome", "rejected"}, {"reason", sanitize_utf8(code, kMaxReasonChars)}}, n(v));
  for (const auto& [reason, v] : r.failed)
    w.sample({{"outcome", "failed"}, {"reason", sanitize_utf8(reason, kMaxReasonChars)}}, n(v));
  w.sample({{"outcome", "lost"}, {"reason", ""}}, n(r.lost));
  w.single("front_requests_held_total", "counter",
           "Requests held at least once (the engine could not be reached or died before its answer).",
           n(r.held));
  w.single("front_requests_held", "gauge", "Requests held now, waiting for an engine.", n(r.held_now));
  w.single("front_requests_resent_total", "counter", "Sends of a held request after its first.", n(r.resent));
  w.single("front_streams_continued_total", "counter", "Streams continued on the next engine after the engine's death.",
           n(r.continued));
}

}  // namespace

std::string render_metrics(const json& status_json, const std::string& version) {
  // A status that does not decode renders as an empty one (every field zero, engine_up 0); the log names
  // the field at fault.
  SupervisorStatus status;
  if (auto decoded = status::supervisor_status_from_json(status_json); decoded.ok()) {
    status = std::move(*decoded);
  } else {
    spdlog::warn("/metrics: {}", decoded.error().message);
  }
  Writer w;
  supervisor_families(w, status, version);
  time_to_ready(w, status.metrics);
  attaches_and_reloads(w, status.metrics);
  start_path_families(w, status.metrics);
  snapshot_families(w, status.metrics);
  standby_families(w, status);
  front_families(w, status);
  daemon_families(w, status);
  arena_families(w, status);
  kv_cache_families(w, status_json);
  memory_families(w, status);
  vllm_families(w, status);
  return w.take();
}

}  // namespace fr::health
