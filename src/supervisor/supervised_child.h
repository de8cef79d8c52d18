// A supervised child: a process started by spawn_child (child.h) whose stdout and stderr are read line by
// line on the loop and logged as "[<prefix>] <line>". This is what the engine, the native weight daemons and
// `vllm preload` have in common. Everything that differs stays with the caller: argv, environment, working
// directory, PID namespace (SpawnSpec), what a line means (on_line), what a spawn failure or an exit does.
// Process groups and PR_SET_PDEATHSIG are spawn_child's: every child leads its own group and dies with
// fastrestartd, except a snapshottable one (spec.new_pid_namespace), which gets no PDEATHSIG (child.h says why).
// Loop thread only, like everything that owns a libuv handle.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>

#include "common/fd.h"
#include "fastrestart/result.h"
#include "supervisor/child.h"
#include "supervisor/loop.h"

namespace fr::supervisor {

// The process-side record of one supervised child. The Supervisor's records (Engine, Daemon, Preload)
// extend it with what they track besides.
struct SupervisedChild {
  pid_t pid = -1;                      // also its process group id (or session id in its own PID namespace)
  UniqueFd pidfd;                      // -1 on kernels without pidfd_open
  UniqueFd output;                     // read end of its stdout+stderr pipe, non-blocking
  std::unique_ptr<LineReader> reader;  // reads `output`: declared after it, so destroyed before it
};

// Called on the loop thread with each line of the child's output (without the newline), after it is logged.
using LineHandler = std::function<void(const std::string&)>;

// Starts `spec` (spawn_child) and records it in `child`, replacing what it held: the previous reader goes
// first (it polls the previous output, which is closed next), then pid, pidfd and output are the new
// child's, and a new reader logs each line at info level as "[log_prefix] line", then calls on_line (if
// set). The reader stops by itself at EOF; the caller resets it when it reaps the child.
// Errors: spawn_child's (the program cannot be run, pipe or fork failed); then nothing was started and
// `child` is left as it was.
Status spawn_supervised(Loop& loop, const SpawnSpec& spec, const std::string& log_prefix, LineHandler on_line,
                        SupervisedChild& child);

// The same reader, over an output pipe that did not come from spawn_supervised (a restored engine writes to
// its restore helper's pipe). Replaces child.reader and child.output in that order; pid and pidfd are the
// caller's.
void read_child_output(Loop& loop, UniqueFd output, const std::string& log_prefix, LineHandler on_line,
                       SupervisedChild& child);

}  // namespace fr::supervisor
