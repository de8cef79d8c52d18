// render_metrics: the status JSON as Prometheus text format 0.0.4. The families and their labels are listed
// in docs/health.md; keep the two in step.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "health/health_server.h"

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

// A number, or `fallback` when absent or not a number (booleans count as 0/1).
double num(const json& j, double fallback = 0) {
  if (j.is_number()) return j.get<double>();
  if (j.is_boolean()) return j.get<bool>() ? 1 : 0;
  return fallback;
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

// An exact value for JSON integers (byte counts beyond 2^53 keep every digit), else format_value.
std::string format_json_value(const json& j) {
  if (j.is_number_unsigned()) return std::to_string(j.get<uint64_t>());
  if (j.is_number_integer()) return std::to_string(j.get<int64_t>());
  return format_value(num(j));
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
  std::string take() { return std::move(m_out); }

 private:
  std::string m_name;
  std::string m_out;
};

constexpr const char* kStates[] = {"loading", "starting", "ready", "draining", "backoff",
                                   "held",    "stopping", "failed", "stopped"};

void supervisor_families(Writer& w, const json& status, const std::string& version) {
  const std::string state = text(field(status, "state"));
  w.family("engine_up", "gauge", "1 while the engine is ready (passed its readiness request), else 0.");
  w.sample({}, state == "ready" ? 1.0 : 0.0);

  w.family("state", "gauge", "The supervisor's lifecycle state: 1 for the current one, 0 for the others.");
  bool known = false;
  for (const char* s : kStates) {
    known = known || state == s;
    w.sample({{"state", s}}, state == s ? 1.0 : 0.0);
  }
  if (!known && !state.empty()) w.sample({{"state", state}}, 1.0);

  const json& reload = field(status, "reload_in_progress");
  w.family("reload_in_progress", "gauge", "1 while a pushed config (reload) is being applied.");
  w.sample({}, reload.is_boolean() && reload.get<bool>() ? 1.0 : 0.0);

  w.family("restarts_total", "counter", "Engine restarts by cause (crash, kernel_oom, cuda_oom, hung, ...).");
  const json& restarts = field(status, "restarts");
  if (restarts.is_object())
    for (const auto& [cause, n] : restarts.items()) w.sample({{"cause", cause}}, format_json_value(n));

  w.family("backoff_seconds", "gauge", "The current delay before the next engine start after a failure.");
  w.sample({}, num(field(status, "backoff_s")));

  w.family("uptime_seconds", "gauge", "Seconds since fastrestartd started.");
  w.sample({}, num(field(status, "uptime_s")));

  w.family("engine_uptime_seconds", "gauge", "Seconds since the current engine process was spawned.");
  const json& engine = field(status, "engine");
  if (engine.is_object()) w.sample({}, num(field(engine, "uptime_s")));

  w.family("build_info", "gauge", "Always 1; the version label is fastrestartd's version.");
  w.sample({{"version", version}}, 1.0);
}

// One histogram per path from {"buckets": [[le, cumulative], ...], "count": n, "sum": s}. Buckets are sorted
// by le and made cumulative-monotonic; +Inf is the larger of count and the last bucket, and _count equals it.
void time_to_ready(Writer& w, const json& metrics) {
  w.family("time_to_ready_seconds", "histogram",
           "Seconds from engine spawn to a passed readiness request, by path (cold, warm, snapshot).");
  const json& ttr = field(metrics, "time_to_ready");
  if (!ttr.is_object()) return;
  for (const auto& [path, h] : ttr.items()) {
    std::vector<std::pair<double, double>> buckets;
    const json& b = field(h, "buckets");
    if (b.is_array())
      for (const auto& pair : b) {
        if (!pair.is_array() || pair.size() < 2 || !pair[0].is_number()) continue;
        const double le = pair[0].get<double>();
        if (std::isnan(le) || std::isinf(le)) continue;
        buckets.emplace_back(le, std::max(0.0, num(pair[1])));
      }
    std::stable_sort(buckets.begin(), buckets.end(), [](auto& a, auto& c) { return a.first < c.first; });
    double running = 0;
    std::vector<std::pair<double, double>> clean;
    for (const auto& [le, n] : buckets) {
      running = std::max(running, n);
      if (!clean.empty() && clean.back().first == le) clean.back().second = running;
      else clean.emplace_back(le, running);
    }
    const double count = std::max(running, std::max(0.0, num(field(h, "count"))));
    for (const auto& [le, n] : clean) w.sample({{"path", path}, {"le", format_value(le)}}, format_value(n), "_bucket");
    w.sample({{"path", path}, {"le", "+Inf"}}, format_value(count), "_bucket");
    w.sample({{"path", path}}, format_value(num(field(h, "sum"))), "_sum");
    w.sample({{"path", path}}, format_value(count), "_count");
  }
}

void attaches_and_reloads(Writer& w, const json& metrics) {
  w.family("weight_attaches_total", "counter",
           "Engine weight attaches by result: hit (served from the daemons' cache), miss (by reason), "
           "fallback (loaded from disk), none (no attach reported).");
  const json& a = field(metrics, "attaches");
  w.sample({{"result", "hit"}}, format_json_value(field(a, "hit")));
  const json& miss = field(a, "miss");
  if (miss.is_object()) {
    // Reasons are free text: truncated ones that collide are summed so each label set appears once.
    std::vector<std::pair<std::string, double>> reasons;
    for (const auto& [reason, n] : miss.items()) {
      std::string r = sanitize_utf8(reason, kMaxReasonChars);
      auto it = std::find_if(reasons.begin(), reasons.end(), [&](auto& p) { return p.first == r; });
      if (it == reasons.end()) reasons.emplace_back(std::move(r), num(n));
      else it->second += num(n);
    }
    for (const auto& [r, n] : reasons) w.sample({{"result", "miss"}, {"reason", r}}, n);
  } else if (miss.is_number()) {
    w.sample({{"result", "miss"}, {"reason", "unknown"}}, format_json_value(miss));
  }
  w.sample({{"result", "fallback"}}, format_json_value(field(a, "fallback")));
  w.sample({{"result", "none"}}, format_json_value(field(a, "none")));

  w.family("reloads_total", "counter", "Config pushes (reloads) by result: warm, cold, rolled_back.");
  const json& r = field(metrics, "reloads");
  for (const char* result : {"warm", "cold", "rolled_back"}) w.sample({{"result", result}}, format_json_value(field(r, result)));

  // Rolled-back pushes by the exit cause of the engine that ran the rejected flags; they are not engine
  // failures of the running configuration, so fastrestart_restarts_total does not count them.
  const json& rb = field(metrics, "rollbacks");
  if (rb.is_object()) {
    w.family("reload_rollbacks_total", "counter", "Rolled-back config pushes by the exit cause of the engine that ran them.");
    for (const auto& [cause, n] : rb.items()) w.sample({{"cause", sanitize_utf8(cause, kMaxReasonChars)}}, format_json_value(n));
  }
}

// Each start path asked at an engine start, by outcome (started, skipped, failed, waiting) and reason code.
void start_path_families(Writer& w, const json& metrics) {
  const json& sp = field(metrics, "start_paths");
  if (!sp.is_array()) return;
  w.family("start_path_total", "counter",
           "Start paths asked at engine starts (restart.start, in order) by outcome and reason: started, skipped "
           "(could not serve), failed (tried, the next path ran), waiting (reloading the daemons first).");
  for (const auto& row : sp)
    w.sample({{"path", sanitize_utf8(text(field(row, "path")), kMaxReasonChars)},
              {"outcome", sanitize_utf8(text(field(row, "outcome")), kMaxReasonChars)},
              {"reason", sanitize_utf8(text(field(row, "reason")), kMaxReasonChars)}},
             format_json_value(field(row, "count")));
}

// Only for supervisors that report snapshots (status "metrics.snapshots"; docs/snapshot.md).
void snapshot_families(Writer& w, const json& metrics) {
  const json& sn = field(metrics, "snapshots");
  if (!sn.is_object()) return;
  w.family("snapshot_restores_total", "counter",
           "Engine starts from a CRIU snapshot by result: restored (oracle matched), fallback (refused or failed; "
           "the next start path ran).");
  w.sample({{"result", "restored"}}, format_json_value(field(sn, "restored")));
  w.sample({{"result", "fallback"}}, format_json_value(field(sn, "fallbacks")));
  w.family("snapshot_creates_total", "counter", "Snapshot creations by result: created, failed.");
  w.sample({{"result", "created"}}, format_json_value(field(sn, "created")));
  w.sample({{"result", "failed"}}, format_json_value(field(sn, "create_failures")));
}

void daemon_families(Writer& w, const json& status) {
  const json& daemons = field(status, "daemons");
  std::vector<std::pair<std::string, const json*>> ds;
  if (daemons.is_array())
    for (size_t i = 0; i < daemons.size(); ++i) {
      std::string gpu = text(field(daemons[i], "gpu"));
      ds.emplace_back(gpu.empty() ? std::to_string(i) : gpu, &daemons[i]);
    }
  w.family("daemon_up", "gauge", "1 while the GPU's weight daemon runs (state ready or loading), else 0.");
  for (const auto& [gpu, d] : ds) {
    const std::string s = text(field(*d, "state"));
    w.sample({{"gpu", gpu}}, s == "ready" || s == "loading" ? 1.0 : 0.0);
  }
  w.family("daemon_held_bytes", "gauge", "Bytes of weights the GPU's daemon holds.");
  for (const auto& [gpu, d] : ds) w.sample({{"gpu", gpu}}, format_json_value(field(*d, "held_bytes")));
  w.family("daemon_load_progress_ratio", "gauge",
           "Preload progress of the GPU's daemon, done/total bytes (1 when ready with nothing to preload).");
  for (const auto& [gpu, d] : ds) {
    const json& p = field(*d, "progress");
    const double done = num(field(p, "done_bytes")), total = num(field(p, "total_bytes"));
    double ratio = total > 0 ? std::clamp(done / total, 0.0, 1.0) : (text(field(*d, "state")) == "ready" ? 1.0 : 0.0);
    w.sample({{"gpu", gpu}}, ratio);
  }
  w.family("daemon_load_rate_bytes_per_second", "gauge", "Current preload throughput of the GPU's daemon.");
  for (const auto& [gpu, d] : ds) w.sample({{"gpu", gpu}}, num(field(field(*d, "progress"), "rate_bytes_per_s")));
}

void memory_families(Writer& w, const json& status) {
  const json& memory = field(status, "memory");
  std::vector<std::pair<std::string, const json*>> ms;
  if (memory.is_array())
    for (size_t i = 0; i < memory.size(); ++i) {
      const json& m = memory[i];
      if (!m.is_object() || m.contains("error")) continue;  // NVML could not read this GPU
      std::string gpu = text(field(m, "gpu"));
      ms.emplace_back(gpu.empty() ? std::to_string(i) : gpu, &m);
    }
  struct Family { const char* name; const char* key; const char* help; };
  static constexpr Family kFamilies[] = {
      {"gpu_memory_total_bytes", "total_bytes", "The GPU's memory size."},
      {"gpu_memory_used_bytes", "used_bytes", "GPU memory in use (every process, the daemons included)."},
      {"gpu_memory_free_bytes", "free_bytes", "GPU memory free."},
      {"gpu_memory_budget_bytes", "budget_bytes", "GPU memory the model may use (memory.utilization x total)."},
  };
  for (const auto& f : kFamilies) {
    w.family(f.name, "gauge", f.help);
    for (const auto& [gpu, m] : ms) w.sample({{"gpu", gpu}}, format_json_value(field(*m, f.key)));
  }
}

// engine.kind = "vllm": what the engine reported about itself, and the loader plugin's attach times
// (docs/vllm.md, "What the supervisor reads"). Absent for other engines.
void vllm_families(Writer& w, const json& status) {
  const json& v = field(field(status, "engine"), "vllm");
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

}  // namespace

std::string render_metrics(const json& status, const std::string& version) {
  Writer w;
  const json& metrics = field(status, "metrics");
  supervisor_families(w, status, version);
  time_to_ready(w, metrics);
  attaches_and_reloads(w, metrics);
  start_path_families(w, metrics);
  snapshot_families(w, metrics);
  daemon_families(w, status);
  memory_families(w, status);
  vllm_families(w, status);
  return w.take();
}

}  // namespace fr::health
