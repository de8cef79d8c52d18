// Restart policy: exponential backoff with a cap and a reset after stable running, a crash-loop limit over
// a sliding window, and the warm-to-cold escalation (ARCHITECTURE.md, "Restart policy and
// classification"). Pure: time is passed in.
#pragma once

#include <deque>
#include <string>

#include "supervisor/config.h"

namespace fr::supervisor {

enum class Verdict { kRestart, kColdRestart, kGiveUp };

class RestartPolicy {
 public:
  explicit RestartPolicy(const RestartConfig& c) : m_c(c) {}

  // An engine became ready at `now` (seconds, monotonic).
  void on_ready(double now);
  // An engine ended at `now`. `failure`: not requested by us. `warm`: it had started on the warm path.
  // Returns what to do next; kRestart/kColdRestart set backoff_s().
  Verdict on_exit(double now, bool failure, bool warm);

  double backoff_s() const { return m_backoff; }
  int failures_in_window() const { return static_cast<int>(m_failures.size()); }
  // Why kGiveUp: "N failures within W s; last: <cause> (<detail>)", status's failure.
  std::string give_up_reason(const std::string& cause, const std::string& detail) const;

 private:
  RestartConfig m_c;
  std::deque<double> m_failures;  // times of recent failures
  double m_ready_at = -1;
  double m_next = 0;              // the next backoff to use
  double m_backoff = 0;
  int m_warm_failures = 0;
};

}  // namespace fr::supervisor
