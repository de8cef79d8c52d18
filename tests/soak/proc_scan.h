// What /proc says about processes, for the soak's leak checks: children, zombies, open descriptors and
// resident memory. Linux only; a process that vanished reads as absent, never as an error.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace fr::soak {

struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';   // R, S, D, Z, ...
  std::string comm;
};

// The process, or pid 0 when it does not exist.
ProcInfo proc_info(pid_t pid);
// Every process whose parent is `ppid`.
std::vector<ProcInfo> children_of(pid_t ppid);
// Open descriptors of `pid` (-1 if unreadable).
int fd_count(pid_t pid);
// VmRSS of `pid` in KiB (-1 if unreadable).
long rss_kib(pid_t pid);
// True while `pid` exists and is not a zombie.
bool running(pid_t pid);
// Reaps every exited child of ours but `keep` (we are a subreaper: the orphans of a killed supervisor
// come to us; `keep` is the supervisor, which its owner waits for).
int reap_children(pid_t keep);

}  // namespace fr::soak
