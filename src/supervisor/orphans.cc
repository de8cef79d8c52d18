#include "supervisor/orphans.h"

#include <signal.h>

#include <spdlog/spdlog.h>

#include "common/control_chars.h"
#include "supervisor/proc_stat.h"

namespace fr::supervisor {

std::vector<Leftover> find_leftovers(pid_t parent, const std::set<pid_t>& known) {
  std::vector<Leftover> out;
  for (pid_t pid : list_pids()) {
    auto st = read_proc_stat(pid);
    if (!st || st->ppid != parent || st->state == 'Z' || st->state == 'X') continue;
    if (known.count(pid) || known.count(st->pgid)) continue;
    out.push_back({pid, st->pgid, st->comm, read_cmdline(pid)});
  }
  return out;
}

std::string describe(const Leftover& l) {
  std::string s = "pid " + std::to_string(l.pid) + " (" + escape_control_chars(l.comm);
  if (!l.cmdline.empty()) s += ": " + escape_control_chars(l.cmdline);
  return s + ")";
}

size_t LeftoverSweeper::sweep(pid_t self, const std::set<pid_t>& known, const std::string& when) {
  // With another namespace's /proc, the processes whose parent field equals our pid are not ours (as PID 1
  // of such a namespace, they are every orphan of the host): find nothing rather than kill strangers.
  if (!proc_matches_pid_namespace()) {
    if (!m_warned_foreign_proc)
      spdlog::warn("engine leftovers are not looked for: /proc belongs to another PID namespace than "
                   "fastrestartd's (mount a /proc of its own, e.g. unshare --pid --fork --mount-proc)");
    m_warned_foreign_proc = true;
    return 0;
  }
  auto found = find_leftovers(self, known);
  if (found.empty()) m_named.clear();  // the sweep is over: a later one names what it finds again
  for (const auto& l : found) {
    if (m_named.insert(l.pid).second) {
      ++m_killed;
      spdlog::warn("killing an engine leftover {} {}: it left the engine's process group and outlived the engine",
                   describe(l), when);
    }
    // Its own group too (a setsid leftover leads one), unless that is a group we know.
    if (l.pgid == l.pid && !known.count(l.pgid)) ::kill(-l.pgid, SIGKILL);
    ::kill(l.pid, SIGKILL);
  }
  return found.size();
}

}  // namespace fr::supervisor
