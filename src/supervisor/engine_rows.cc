#include "supervisor/engine_rows.h"

#include <ctime>

namespace fr::supervisor {

ExitFacts engine_exit_facts(const Engine& e, int wait_status, bool stopping, std::optional<uint64_t> oom_after) {
  ExitFacts f;
  f.wait_status = wait_status;
  f.requested = stopping || (e.stop_requested && !e.killed_hang && !e.killed_timeout);
  f.killed_for_timeout = e.killed_timeout;
  f.killed_for_hang = e.killed_hang;
  f.oom_kill_recorded = e.oom_before && oom_after && *oom_after > *e.oom_before;
  return f;
}

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

std::string warm_miss_reason(const Engine& e, const std::string& socket_dir) {
  if (!e.miss_reason.empty()) return e.miss_reason;
  return "the engine did not ask the weight daemons (no attach or miss by its pid): does it look for their "
         "sockets in " + socket_dir + " (FASTRESTART_SOCKET_DIR)?";
}

status::EngineStatus engine_row(const Engine& e, double now) {
  status::EngineStatus row;
  row.pid = e.pid;
  row.uptime_s = now - e.spawned_at;
  row.path = e.path;
  row.snapshot_id = e.snapshot_id;
  row.flags = e.flags.redacted();
  row.running = !e.exited;
  row.readiness_endpoint = e.endpoint_note;
  row.vllm = e.report->to_json();  // the kind's own report (null for generic)
  return row;
}

status::MemoryRowStatus memory_row(const std::string& gpu, const Result<GpuMemory>& m, double utilization,
                                   const GpuShare& share) {
  status::MemoryRowStatus row;
  row.gpu = gpu;
  if (!m.ok()) {
    row.error = m.error().message;
    return row;
  }
  row.uuid = m->uuid;
  row.name = m->name;
  row.total_bytes = m->total;
  row.used_bytes = m->used;
  row.free_bytes = m->free;
  row.budget_bytes = static_cast<uint64_t>(utilization * static_cast<double>(m->total));
  row.daemon_held_bytes = share.in.held;
  row.standby_reserve_bytes = share.in.reserve;
  row.arena_bytes = share.in.arena;
  row.engine_share = share.share;
  row.engine_share_bytes = share.share_bytes;
  row.engine_own_bytes = share.own_bytes;
  return row;
}

}  // namespace fr::supervisor
