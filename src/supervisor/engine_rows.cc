#include "supervisor/engine_rows.h"

#include <ctime>

namespace fr::supervisor {

status::LastExitStatus exit_row(const Engine& e, const std::string& cause, const std::string& detail) {
  status::LastExitStatus row = unrun_exit_row(cause, detail, e.died_at);
  row.pid = e.pid;
  row.uptime_s = e.died_at - e.spawned_at;
  row.was_ready = !e.path.empty();
  return row;
}

status::LastExitStatus unrun_exit_row(const std::string& cause, const std::string& detail, std::optional<double> died_at) {
  status::LastExitStatus row;
  row.cause = cause;
  row.detail = detail;
  row.unix_time = static_cast<int64_t>(std::time(nullptr));
  row.died_at_s = died_at;
  return row;
}

status::LastStartStatus start_row(const Engine& e, const std::string& path, double ready_at, double since_previous_exit,
                                  std::vector<status::StartAttemptStatus> attempts) {
  status::LastStartStatus row;
  row.path = path;
  row.time_to_ready_s = ready_at - e.spawned_at;
  row.since_previous_exit_s = since_previous_exit;
  row.ready_at_s = ready_at;
  row.unix_time = static_cast<int64_t>(std::time(nullptr));
  row.pid = e.pid;
  row.start_paths = std::move(attempts);
  if (!e.snapshot_id.empty()) row.snapshot_id = e.snapshot_id;
  return row;
}

}  // namespace fr::supervisor
