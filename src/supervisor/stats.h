// What fastrestartd counts over its life (docs/health.md, the status's "metrics", "restarts" and
// "rollbacks"): time-to-ready histograms by start path, attaches and their misses, reloads, restarts by
// cause, rolled-back pushes, and each start path's outcomes. The Supervisor records into one Stats; status
// and /metrics read it through fill(). Counts only grow; nothing here is reset while fastrestartd runs.
// Not thread-safe: the Supervisor's loop thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "status/status.h"

namespace fr::supervisor {

// Seconds from an engine's spawn to its readiness, in fixed buckets (Prometheus' `le` bounds).
class Histogram {
 public:
  static constexpr double kBounds[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800};

  // A value above the last bound is counted in count and sum only (Prometheus' +Inf bucket).
  void add(double seconds);
  uint64_t count() const { return m_count; }
  double sum() const { return m_sum; }
  nlohmann::json to_json() const;          // {"buckets": [[le, cumulative count], ...], "count", "sum"}
  status::HistogramStatus to_status() const;  // the same, typed

 private:
  std::vector<uint64_t> m_counts = std::vector<uint64_t>(std::size(kBounds), 0);  // per bound, not cumulative
  uint64_t m_count = 0;
  double m_sum = 0;
};

class Stats {
 public:
  // Rolled-back pushes kept with their reason for status (`rollbacks.recent`); older ones are only counted.
  static constexpr size_t kRecentRollbacks = 10;

  void ready(const std::string& path, double since_spawn_s) { m_ready[path].add(since_spawn_s); }
  void attach(const std::string& outcome) { m_attaches[outcome]++; }  // hit | fallback | none
  void attach_miss(const std::string& reason) { m_misses[reason]++; }
  void reload(const std::string& outcome) { m_reloads[outcome]++; }   // warm | cold | rolled_back
  void restart(const std::string& cause) { m_restarts[cause]++; }     // rejected pushes are rollbacks instead
  // A rolled-back push, counted apart from the engine's failures; `rejected_flags` already redacted.
  void rollback(const std::string& cause, const std::string& detail, const std::vector<std::string>& rejected_flags,
                int64_t unix_time);
  // One start path's answer at a start (started | skipped | failed | waiting) and its reason code.
  void start_attempt(std::string_view path, const std::string& outcome, const std::string& reason);

  // By start path, for a snapshot's break-even (snapshots/snapshots_control.cc).
  const std::map<std::string, Histogram>& time_to_ready() const { return m_ready; }

  // Sets the status's restarts, rollbacks and metrics; metrics.snapshots is the snapshot side's.
  void fill(status::SupervisorStatus& st) const;

 private:
  std::map<std::string, Histogram> m_ready;      // by path
  std::map<std::string, uint64_t> m_attaches;    // hit | fallback | none
  std::map<std::string, uint64_t> m_misses;      // by reason
  std::map<std::string, uint64_t> m_reloads;     // warm | cold | rolled_back
  std::map<std::string, uint64_t> m_restarts;    // by cause
  std::map<std::string, uint64_t> m_rollbacks;   // by the exit cause of the rejected engine
  std::deque<nlohmann::json> m_recent_rollbacks;  // the last kRecentRollbacks, with why
  std::map<std::string, uint64_t> m_start_counts;  // "path/outcome/reason" -> count
};

}  // namespace fr::supervisor
