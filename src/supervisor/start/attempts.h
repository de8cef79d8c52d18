// The record of the current (or last) start's walk of restart.start (docs/supervisor.md, "Start paths"):
// each listed path asked, in order, and what it answered. Status "start_paths", STATUS= ("skipped warm:
// ..."), the log, and /metrics fastrestart_start_path_total (through Stats) read it.
#pragma once

#include <string>
#include <vector>

#include "status/status.h"
#include "supervisor/start/start_path.h"
#include "supervisor/stats.h"

namespace fr::supervisor {

struct StartAttempt {
  StartPath path;
  std::string outcome;  // skipped | failed | waiting | started
  StartRefusal why;
};

class StartAttempts {
 public:
  explicit StartAttempts(Stats& stats) : m_stats(stats) {}
  void clear() { m_attempts.clear(); }
  // Counts the attempt in Stats and logs a skip or failure.
  void record(StartPath p, const std::string& outcome, const StartRefusal& why);
  // The start waits for `why` on `p` before any path is asked (the dump of `snapshot create`); not counted.
  void wait_first(StartPath p, const StartRefusal& why) { m_attempts = {{p, "waiting", why}}; }
  bool waiting(const char* code) const;  // the last attempt waits, for `code` (reloading_daemons, snapshot_create)
  std::string text() const;              // the skips and failures, "skipped warm: ...; failed snapshot: ..."
  std::vector<status::StartAttemptStatus> rows() const;
  // The last attempt on `p`, nullptr when this start made none.
  const StartAttempt* last_on(StartPath p) const;

 private:
  Stats& m_stats;
  std::vector<StartAttempt> m_attempts;
};

}  // namespace fr::supervisor
