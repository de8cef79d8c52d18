// What the snapshots part (snapshots.h) needs from the supervisor (the loop and the config come with its
// construction: part.h's PartBasics), in two interfaces: SnapshotHost, the engine's command line as a
// start would run it, what a `snapshot` command is refused for, and the dump's steps on the live engine;
// RestoreHost, the restore's steps, which make the live engine's record. The live engine stays the
// supervisor's (a restore makes its record, a dump pauses its health checks). Implemented by Supervisor;
// tests give their own. Loop thread only.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"
#include "supervisor/config.h"
#include "supervisor/engine_launch.h"
#include "supervisor/lifecycle.h"
#include "supervisor/loop.h"
#include "supervisor/stats.h"

namespace fr::supervisor {

// The live engine as a dump sees it.
struct DumpTarget {
  pid_t pid = -1;
  bool in_pid_ns = false;  // PID 1 of its own PID namespace: only such an engine can be dumped
  int output_fd = -1;      // the read end of its stdout and stderr pipe (-1: none)
};

class SnapshotHost {
 public:
  virtual ~SnapshotHost() = default;
  // Feeds the lifecycle table: kRestartRequested (`snapshot restore`), kSnapshotCreated.
  virtual void raise(Event e) = 0;
  virtual void set_status(const std::string& s, const std::string& extra = {}) = 0;
  // What an engine start runs now (argv with its flags, environment; engine_launch.h): the helper's spec.
  virtual EngineCommand engine_command(bool for_standby) = 0;

  // Control: a create or restore needs an engine that serves and no reload; the words say why not.
  virtual bool engine_serving() const = 0;
  virtual std::string reported_state() const = 0;  // the supervisor's state as status reports it
  virtual bool reload_running() const = 0;

  // The dump (`snapshot create`). dump_target: the live engine (engine_serving() first). dump_begins: the
  // dump ends the engine, so its exit is asked for and its health is no longer checked. dump_failed: the
  // engine still serves (CRIU resumed it): back to normal. create_finished: the create is over; a start
  // waiting for it goes on.
  virtual DumpTarget dump_target() const = 0;
  virtual void dump_begins() = 0;
  virtual void dump_failed() = 0;
  virtual void create_finished() = 0;
};

class RestoreHost {
 public:
  virtual ~RestoreHost() = default;
  // The restore (the start path "snapshot"). restoring_engine: make the record of the engine the helper
  // restores from `id` (no pid until it reports one) and say so in the status. Then either
  // restore_spawned (the helper runs: `output` is the restored engine's stdout and stderr, and the start's
  // deadline runs) or restore_not_spawned (no helper: the record goes). engine_present: the record is still
  // there (a stop may have ended it). restored: the helper reported the engine's pid; `exited` when it was
  // reaped before that. restore_failed: nothing was restored; `detail` says why (the next path is tried,
  // unless the engine was being stopped).
  virtual void restoring_engine(const std::string& id) = 0;
  virtual void restore_spawned(UniqueFd output) = 0;
  virtual void restore_not_spawned() = 0;
  virtual bool engine_present() const = 0;
  virtual void restored(pid_t pid, std::optional<int> exited) = 0;
  virtual void restore_failed(const std::string& detail) = 0;
};

}  // namespace fr::supervisor
