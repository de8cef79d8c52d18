// Weight daemons: the processes that hold the checkpoint's weights across engine restarts (ARCHITECTURE.md,
// "How to add a weight-daemon kind"). One DaemonSet per supervisor, of the kind weights.daemon names:
// the per-GPU fastrestart-weightd set (native.cc), `vllm preload` (vllm_preload.cc), or none (none.cc).
// make_daemon_set picks it. A set owns its processes and timers and acts on the supervisor only through
// its DaemonHost: it raises the lifecycle table's events, never changes the supervisor's state itself.
// Loop thread only, like everything that owns a libuv handle.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "supervisor/config.h"
#include "supervisor/engines/engine_kind.h"
#include "supervisor/host_probe.h"
#include "supervisor/lifecycle.h"
#include "supervisor/loop.h"
#include "supervisor/start/start_path.h"
#include "status/status.h"

namespace fr::supervisor {

// What a set needs from the supervisor (implemented by Supervisor; tests give their own).
class DaemonHost {
 public:
  virtual ~DaemonHost() = default;
  virtual Loop& loop() = 0;
  virtual const Config& config() const = 0;
  virtual GpuProbe& gpus() = 0;
  // Feeds the lifecycle table (lifecycle.h): kDaemonsReady, kDaemonsFailed, kDaemonsStopped, kPreloadDied,
  // kCheckpointChanged.
  virtual void raise(Event e) = 0;
  virtual bool awaiting_daemons() const = 0;  // the state waits for the daemons' readiness (awaits_daemons)
  virtual bool terminal() const = 0;          // stopping or failed: nothing is started again (is_terminal)
  // STATUS= and the status text; `extra` goes before it (EXTEND_TIMEOUT_USEC=...).
  virtual void set_status(const std::string& s, const std::string& extra = {}) = 0;
  virtual const std::string& status_text() const = 0;
  virtual const FlagList& engine_flags() const = 0;  // the engine's current flags
  virtual const EngineAdapter& engine_kind() const = 0;
};

class DaemonSet {
 public:
  virtual ~DaemonSet() = default;
  virtual const char* kind() const = 0;  // "native" | "vllm-preload" | "none"

  // Lifecycle. start() replaces the records of any earlier processes and raises kDaemonsReady or
  // kDaemonsFailed once while the host awaits the daemons (posted, not from inside the call). stop()
  // raises kDaemonsStopped once every process is gone (posted when none runs). on_exit: a reaped child;
  // false when `pid` is none of the set's. An unexpected death is the kind's: a respawn with backoff
  // (native) or kPreloadDied (vllm preload). close(): the loop ends; drop every handle.
  virtual void start() = 0;
  virtual void stop() = 0;
  virtual bool stopping() const = 0;  // a stop is under way
  virtual bool on_exit(pid_t pid, int status) = 0;
  virtual void close() = 0;
  // Asks the daemons for their status now (an engine may have published a pool since the last poll).
  virtual void refresh() {}

  // What the supervisor reads: bytes held on `gpu` (as configured in gpus; the leak check and the
  // engine's memory share), the live processes (not engine leftovers: orphans.h), the status rows.
  virtual uint64_t held_bytes(const std::string& gpu) const = 0;
  // The KV arenas the daemon on `gpu` holds, allocated bytes (docs/weightd.md, "KV arenas"): not in
  // held_bytes. Also the daemon's GPU memory, but the engine's own in the budget (memory_share.h); 0 for a
  // kind without arenas.
  virtual uint64_t arena_bytes(const std::string& /*gpu*/) const { return 0; }
  virtual void add_known_pids(std::set<pid_t>& known) const = 0;
  virtual std::vector<status::DaemonRowStatus> rows() const = 0;

  // What the start paths ask (StartHost): nullopt when the daemons hold weights an engine can attach to
  // now, else why not; whether live daemons hold weights an earlier engine loaded or used.
  virtual std::optional<StartRefusal> refusal() const = 0;
  virtual bool holds_old_weights() const = 0;

  // How an engine uses the daemons. loader_protocol: they speak docs/protocol.md (the engine_loader
  // attaches through them; their status records attaches and misses by client pid, attach_sockets).
  // engine_report_decides: the engine's own words say whether it attached. preload_use: what the next
  // engine's flags are told (EngineAdapter::flags_for_preload); nullopt when the kind has no such flags.
  // engine_spawned: an engine is started on the set now; true when it starts strict (no disk fallback).
  virtual bool loader_protocol() const { return false; }
  virtual std::vector<std::string> attach_sockets() const { return {}; }
  virtual bool engine_report_decides() const { return false; }
  virtual std::optional<PreloadUse> preload_use() const { return std::nullopt; }
  virtual bool engine_spawned() { return false; }

  // Whether an engine used what the daemons hold: false from a reload of the daemons until an engine is
  // ready on them (it attached, or loaded and published).
  void expect_fresh() { m_used = false; }
  void engine_ready() { m_used = true; }

 protected:
  bool used() const { return m_used; }

 private:
  bool m_used = false;
};

// The set weights.daemon and weights.mode name (registry.cc): none when the mode is off.
std::unique_ptr<DaemonSet> make_daemon_set(DaemonHost& host);

// The sockets of the weight daemons `c` starts that one fastrestartd must own alone (its instance claims,
// instance_claims.h): each native daemon's; none for the other kinds, whose daemons are not fastrestart's
// sockets to claim, and none with weights.mode off.
std::vector<std::string> claimed_daemon_sockets(const Config& c, GpuProbe& gpus);

// One implementation per file.
std::unique_ptr<DaemonSet> make_native_daemons(DaemonHost& host);
std::unique_ptr<DaemonSet> make_vllm_preload(DaemonHost& host);
std::unique_ptr<DaemonSet> make_no_daemons(DaemonHost& host, std::string why);

}  // namespace fr::supervisor
