// Ending the live engine (docs/supervisor.md, "Stopping and the drain"): the stop fastrestartd asks for,
// and the drain after its main process exited, before anything starts again.
//   terminate(): SIGTERM to the engine's process group, then SIGKILL if the group still lives after
//     engine.stop_grace_s (or SIGKILL at once).
//   drain(): waits until the engine's group is gone (SIGKILL once it has outlived its leader by
//     engine.stop_grace_s), the processes it left that came back to fastrestartd as orphans are swept
//     (orphans.h), and, unless the next start waits for no memory, each GPU's used memory is back to what is
//     expected of it without the engine (gpu_leftover.h; at most memory.settle_timeout_s, then a warning
//     naming what is left); then it calls `done`.
// The Supervisor holds one and answers its EngineEndHost. Loop thread only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "supervisor/config.h"
#include "supervisor/host_probe.h"
#include "supervisor/loop.h"
#include "supervisor/orphans.h"

namespace fr::supervisor {

class EngineEndHost {
 public:
  virtual ~EngineEndHost() = default;
  // fastrestartd's own children (daemons, helpers, a standby, the front): never swept as leftovers.
  virtual std::set<pid_t> known_children() const = 0;
  // fastrestartd itself is stopping: the sweep's log says "at stop" instead of "before the next start".
  virtual bool stopping() const = 0;
  // The next start is a standby's release, which waits for no memory (docs/standby.md, "Memory"): the drain
  // skips the GPU memory check.
  virtual bool release_follows() const = 0;
  // What stays used on `gpu` whatever the engine does: the weight daemons' pools and KV arenas.
  virtual uint64_t daemon_gpu_bytes(const std::string& gpu) const = 0;
  // A standby's processes on `gpu` (0: none).
  virtual uint64_t standby_gpu_bytes(const std::string& gpu) const = 0;
};

class EngineEnd {
 public:
  EngineEnd(Loop& loop, const Config& cfg, GpuProbe& gpus, EngineEndHost& host);

  // Before an engine is spawned: each GPU's used memory now, less what the daemons hold, is what the drain
  // expects back (with the daemons' and a standby's memory of then). A GPU that cannot be read keeps its
  // last figure. Not on weights.backend "host" (no GPU memory to account).
  void note_engine_spawn();

  // The engine's group `pgid` (its leader's `pidfd`, -1: none): SIGKILL now, or SIGTERM and SIGKILL
  // after engine.stop_grace_s while the group lives.
  void terminate(pid_t pgid, int pidfd, bool kill_now);

  // The drain of the group `pgid` (-1: no engine ran), as the header says; `done` runs on the loop once it
  // is over, with a pending terminate() cancelled. A drain started while one runs replaces it.
  void drain(pid_t pgid, std::function<void()> done);

  // Cancels both (fastrestartd's exit).
  void stop();

 private:
  void drain_step();

  Loop& m_loop;
  const Config& m_cfg;
  GpuProbe& m_gpus;
  EngineEndHost& m_host;
  Timer m_kill_timer, m_drain_timer;
  LeftoverSweeper m_leftovers;
  // Per GPU: used before the engine started, less the daemons' memory then (contexts, the driver's reserve,
  // other processes).
  std::map<std::string, double> m_baseline_used;
  pid_t m_pgid = -1;
  double m_drain_start = 0;
  std::function<void()> m_done;
};

}  // namespace fr::supervisor
