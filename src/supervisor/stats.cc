#include "supervisor/stats.h"

namespace fr::supervisor {

using nlohmann::json;

void Histogram::add(double seconds) {
  size_t i = 0;
  while (i < std::size(kBounds) && seconds > kBounds[i]) ++i;
  if (i < m_counts.size()) m_counts[i]++;
  m_count++;
  m_sum += seconds;
}

status::HistogramStatus Histogram::to_status() const {
  status::HistogramStatus h;
  uint64_t cum = 0;
  for (size_t i = 0; i < std::size(kBounds); ++i) {
    cum += m_counts[i];
    h.buckets.emplace_back(kBounds[i], cum);
  }
  h.count = m_count;
  h.sum = m_sum;
  return h;
}

json Histogram::to_json() const {
  json b = json::array();
  uint64_t cum = 0;
  for (size_t i = 0; i < std::size(kBounds); ++i) {
    cum += m_counts[i];
    b.push_back({kBounds[i], cum});
  }
  return {{"buckets", b}, {"count", m_count}, {"sum", m_sum}};
}

void Stats::rollback(const std::string& cause, const std::string& detail, const std::vector<std::string>& rejected_flags,
                     int64_t unix_time) {
  m_rollbacks[cause]++;
  m_recent_rollbacks.push_back({{"unix_time", unix_time}, {"cause", cause}, {"detail", detail}, {"rejected_flags", rejected_flags}});
  if (m_recent_rollbacks.size() > kRecentRollbacks) m_recent_rollbacks.pop_front();
}

void Stats::start_attempt(std::string_view path, const std::string& outcome, const std::string& reason) {
  m_start_counts[std::string(path) + "/" + outcome + "/" + reason]++;
}

void Stats::fill(status::SupervisorStatus& st) const {
  for (const auto& [k, v] : m_restarts) st.restarts[k] = v;
  status::MetricsStatus& mt = st.metrics;
  for (const auto& [path, h] : m_ready) mt.time_to_ready[path] = h.to_status();
  for (const auto& [k, v] : m_attaches) {
    if (k == "hit") mt.attaches_hit = v;
    else if (k == "fallback") mt.attaches_fallback = v;
    else if (k == "none") mt.attaches_none = v;
  }
  for (const auto& [k, v] : m_misses) mt.attach_misses[k] = v;
  for (const auto& [k, v] : m_reloads) {
    if (k == "warm") mt.reloads_warm = v;
    else if (k == "cold") mt.reloads_cold = v;
    else if (k == "rolled_back") mt.reloads_rolled_back = v;
  }
  for (const auto& [k, v] : m_rollbacks) {
    st.rollbacks.by_cause[k] = v;
    st.rollbacks.count += v;
  }
  mt.rollbacks = st.rollbacks.by_cause;
  for (const auto& r : m_recent_rollbacks) st.rollbacks.recent.push_back(r);
  // The key's path and outcome hold no '/'; the reason is the rest.
  for (const auto& [key, n] : m_start_counts) {
    const size_t a = key.find('/'), b = key.find('/', a + 1);
    mt.start_paths.push_back({key.substr(0, a), key.substr(a + 1, b - a - 1), key.substr(b + 1), n});
  }
}

}  // namespace fr::supervisor
