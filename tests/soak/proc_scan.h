// What /proc says about processes, for the soak's leak checks: children, zombies, open descriptors and
// resident memory. Linux only; a process that vanished reads as absent, never as an error.
#pragma once

#include <sys/types.h>

#include <cstdint>
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
// VmRSS of `pid` in KiB (-1 if unreadable).
long rss_kib(pid_t pid);
// True while `pid` exists and is not a zombie.
bool running(pid_t pid);
// Reaps every exited child of ours but `keep` (we are a subreaper: the orphans of a killed supervisor
// come to us; `keep` is the supervisor, which its owner waits for).
int reap_children(pid_t keep);

// The processes holding a socket that listens on TCP `port` (any address, IPv4 or IPv6; this network
// namespace): the sockets from /proc/net/tcp{,6}, their holders from the /proc/<pid>/fd we may read.
// `sockets`, when given, gets the number of listening sockets on the port (held by anyone).
std::vector<pid_t> listening_pids(uint16_t port, int* sockets = nullptr);
// Only the number of sockets listening on `port` (cheap: two small files).
int listening_sockets(uint16_t port);
// Whether `pid` was started with `name` in its environment (/proc/<pid>/environ: the environment it was
// exec'ed with, which a later unsetenv does not change).
bool started_with_env(pid_t pid, const std::string& name);
// Its command line, the arguments separated by NUL as in /proc/<pid>/cmdline ("" when gone).
std::string cmdline(pid_t pid);

}  // namespace fr::soak
