// Engine leftovers: processes that left the engine's process group (setsid, setpgid) and so escape the
// group's SIGTERM/SIGKILL. fastrestartd is a child subreaper (PR_SET_CHILD_SUBREAPER), so when their parent
// dies they become its children. Every child of fastrestartd that is not one it started (a weight daemon,
// the preload launcher, the snapshot helper, the engine) or in such a child's process group is such a
// leftover: one that holds the engine's port would make every next engine crash while it serves
// unsupervised, and one that holds GPU memory would shrink the next engine's share. fastrestartd names
// them in the log and SIGKILLs them (and their own process groups) after the engine's group is gone,
// before the next engine starts and before the daemons stop.
#pragma once

#include <sys/types.h>

#include <set>
#include <string>
#include <vector>

namespace fr::supervisor {

struct Leftover {
  pid_t pid = 0;
  pid_t pgid = 0;
  std::string comm, cmdline;
};

// Live (not zombie) processes whose parent is `parent` and whose pid and process group are both outside
// `known`.
std::vector<Leftover> find_leftovers(pid_t parent, const std::set<pid_t>& known);

// "pid 1234 (comm: cmdline)", control characters escaped: the command line is the leftover's own text.
std::string describe(const Leftover& l);

// The sweep, repeated until it returns 0 (at once when /proc is not of fastrestartd's PID namespace:
// proc_matches_pid_namespace): each call SIGKILLs the leftovers seen (each named in the log
// once, with `when`) and returns how many are still alive. Killing one can orphan its own children to us:
// the next call finds them.
class LeftoverSweeper {
 public:
  size_t sweep(pid_t self, const std::set<pid_t>& known, const std::string& when);
  uint64_t killed() const { return m_killed; }  // leftovers killed so far

 private:
  std::set<pid_t> m_named;  // named in the log during the current sweep
  uint64_t m_killed = 0;
  bool m_warned_foreign_proc = false;  // said once that /proc is another PID namespace's
};

}  // namespace fr::supervisor
