// What /proc says about a process: its parent, group, state and start time (proc(5), /proc/<pid>/stat),
// and its command line. For the engine-leftover sweep (orphans.h) and the engine group record
// (engine_group_record.h).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fr::supervisor {

struct ProcStat {
  pid_t pid = 0;
  std::string comm;         // field 2, without the parentheses
  char state = '?';         // field 3: R, S, D, Z (zombie), ...
  pid_t ppid = 0;           // field 4
  pid_t pgid = 0;           // field 5
  uint64_t start_time = 0;  // field 22: clock ticks after boot; with the pid, it names one process
};

// Nullopt when the process is gone (or /proc is not readable).
std::optional<ProcStat> read_proc_stat(pid_t pid);
// /proc/<pid>/cmdline with its NULs as spaces, at most `max` bytes; "" for a zombie or a kernel thread.
std::string read_cmdline(pid_t pid, size_t max = 256);
// Every pid in /proc now.
std::vector<pid_t> list_pids();
// Whether the /proc mounted here belongs to this process's PID namespace (/proc/self names getpid()).
// When it does not (a PID namespace entered without a /proc of its own: `unshare --pid --fork` without
// --mount-proc), pids read from /proc are another namespace's: the parent fields of this process's
// children say nothing about them, and a pid read there names some other process here.
bool proc_matches_pid_namespace();

}  // namespace fr::supervisor
