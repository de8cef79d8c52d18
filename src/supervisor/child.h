// Spawning supervised children: each in its own process group, with an explicit environment (never
// NOTIFY_SOCKET, WATCHDOG_*, or LISTEN_* other than spawn_child's own for SpawnSpec::listen_fd), stdout+stderr on one pipe for line capture, and a pidfd.
// A child holds exactly its descriptors: 0 (/dev/null), 1 and 2 (the pipe), SpawnSpec::pass_fd and the
// listening socket at 3; every other one fastrestartd has open, close-on-exec or not, is closed between
// fork and exec (close_fds_except, docs/reliability.md "Descriptors a child gets").
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "common/fd.h"
#include "fastrestart/result.h"

namespace fr::supervisor {

struct SpawnSpec {
  std::vector<std::string> argv;            // argv[0]: a path, or a name looked up in $PATH
  std::map<std::string, std::string> env;   // set on top of the filtered inherited environment
  std::string working_dir;
  std::string cgroup_procs;                 // if set: write the child's pid here before exec (cgroup v1/v2)
  // PID 1 of a new PID namespace and leader of a new session (so of its process group): what a CRIU
  // snapshot needs (docs/snapshot.md). Also a new mount namespace, whose only own mount is a /proc of that
  // PID namespace (every other mount is a slave of the host's). Still our direct child; its pid here is
  // the host's. Needs CAP_SYS_ADMIN.
  bool new_pid_namespace = false;
  // An open descriptor the child inherits under the same number (a standby's gate socket, docs/standby.md).
  // The caller opens it close-on-exec so that no other child inherits it; -1: none.
  int pass_fd = -1;
  // A listening socket handed down with systemd's convention (docs/listen-socket.md): the child gets it as
  // fd 3 with LISTEN_FDS=1, LISTEN_PID=<its own pid, as it sees it: 1 in a new PID namespace> and
  // LISTEN_FDNAMES=listen_fd_name. The caller keeps it close-on-exec so that no other child inherits it.
  // pass_fd must not be 3 then (an error). -1: none, and no LISTEN_* variable reaches the child.
  int listen_fd = -1;
  std::string listen_fd_name;
  // With listen_fd: a second listening socket, the engine's private endpoint (docs/listen-socket.md,
  // "The private endpoint"), passed as fd 4: LISTEN_FDS=2, LISTEN_FDNAMES=<listen_fd_name>:<probe_fd_name>.
  // Close-on-exec in the caller like listen_fd; pass_fd must not be 4 then, nor new_pid_namespace set (errors). -1: none.
  int probe_fd = -1;
  std::string probe_fd_name;
};

struct Spawned {
  pid_t pid = -1;        // also the process group id
  UniqueFd pidfd;        // -1 on kernels without pidfd_open
  UniqueFd output;       // read end: the child's stdout and stderr, non-blocking
};

// The inherited environment minus what belongs to the supervisor (NOTIFY_SOCKET, WATCHDOG_PID,
// WATCHDOG_USEC, LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES, INVOCATION_ID stays), plus `extra`.
std::vector<std::string> child_environment(const std::map<std::string, std::string>& extra);

// fork + exec. Errors: the exec failure is reported through a CLOEXEC pipe, so "no such program" is
// an error here, not a mysterious exit code 127 later.
Result<Spawned> spawn_child(const SpawnSpec& spec);

// Signals the whole process group (and, through the pidfd, the leader even if it left the group).
void signal_group(pid_t pgid, int pidfd, int sig);
// True while any process of the group exists (zombies we have not reaped count as gone only once reaped).
bool group_alive(pid_t pgid);

// The engine's process group outlives a SIGKILLed fastrestartd when its leader forked workers into it
// (the leader itself dies with its parent: PR_SET_PDEATHSIG). fastrestartd records the group's id in its
// state directory while an engine runs; the next fastrestartd calls this before starting anything: it
// removes the record and SIGKILLs the group if it is still the recorded one (engine_group_record.h: the
// leader's start time matches, every member runs under our uid). Returns the pgid killed, or 0.
pid_t kill_recorded_group(const std::string& path);

// Finds `name` in $PATH (or returns it when it contains a '/').
std::string find_program(const std::string& name);

// A program of this package: beside the running executable (installed: /usr/bin), else in the build tree's
// sibling folder `build_dir` (src/<build_dir>/<name>), else in $PATH.
std::string find_companion(const std::string& name, const std::string& build_dir);

}  // namespace fr::supervisor
