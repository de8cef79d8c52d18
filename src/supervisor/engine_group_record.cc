#include "supervisor/engine_group_record.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <spdlog/spdlog.h>
#include <sstream>
#include <vector>

#include "common/io.h"
#include "supervisor/child.h"
#include "supervisor/proc_stat.h"
#include "supervisor/state_files.h"

namespace fr::supervisor {

std::string engine_group_record(pid_t pgid) {
  auto st = read_proc_stat(pgid);
  if (!st) return std::to_string(pgid) + "\n";
  return std::to_string(pgid) + " " + std::to_string(st->start_time) + "\n";
}

pid_t kill_recorded_group(const std::string& path) {
  auto text = read_file(path, 64);
  ::unlink(path.c_str());
  if (!text.ok()) return 0;
  long pgid = 0;
  unsigned long long started = 0;
  std::istringstream in(*text);
  if (!(in >> pgid) || pgid <= 1) return 0;
  if (!(in >> started)) {
    spdlog::warn("{}: records process group {} without its leader's start time: leaving it alone", path, pgid);
    return 0;
  }
  // The group is the recorded engine's only if its leader, when it still runs, started when recorded
  // (its pid is not reused while the group exists), no member started before the leader did, and every
  // member runs under our uid.
  std::vector<ProcStat> members;
  bool ours = true;
  for (pid_t pid : list_pids()) {
    auto st = read_proc_stat(pid);
    if (!st || st->pgid != pgid) continue;
    struct stat ps {};
    if (::stat(("/proc/" + std::to_string(pid)).c_str(), &ps) != 0) continue;  // gone meanwhile
    if (ps.st_uid != ::geteuid()) ours = false;
    members.push_back(*st);
  }
  if (members.empty()) return 0;
  std::string why;
  for (const auto& m : members) {
    if (m.pid == pgid && m.start_time != started)
      why = "its leader started at tick " + std::to_string(m.start_time) + ", the record says " + std::to_string(started);
    else if (m.start_time < started)
      why = "member pid " + std::to_string(m.pid) + " started before the recorded leader";
  }
  if (!ours) why = "a member runs under another uid";
  if (!why.empty()) {
    spdlog::warn("{}: process group {} is not the engine recorded there ({}): leaving it alone", path, pgid, why);
    return 0;
  }
  ::kill(static_cast<pid_t>(-pgid), SIGKILL);
  return static_cast<pid_t>(pgid);
}

int kill_left_engine_groups(const Config& cfg) {
  int killed = 0;
  for (const char* record : {"engine.pgid", "standby.pgid"})
    if (pid_t g = kill_recorded_group(state_path(cfg, record))) {
      spdlog::warn("killed process group {} ({}), left running by a previous fastrestartd that did not stop cleanly", g, record);
      ++killed;
    }
  return killed;
}

}  // namespace fr::supervisor
