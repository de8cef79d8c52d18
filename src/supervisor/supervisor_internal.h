// Private to the Supervisor's .cc files: the records of its children and of a pending reload.
#pragma once

#include <deque>
#include <future>
#include <memory>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/file_identity.h"
#include "protocol/daemon_status.h"
#include "supervisor/checkpoint_files.h"
#include "supervisor/state_files.h"
#include "supervisor/loop.h"
#include "supervisor/policy.h"
#include "supervisor/standby/streak.h"
#include "supervisor/supervised_child.h"
#include "supervisor/supervisor.h"
#include "supervisor/engines/engine_kind.h"

namespace fr::supervisor {

// The children's records extend SupervisedChild (supervised_child.h): pid, pidfd, output and its reader.
struct Supervisor::Engine : SupervisedChild {
  double spawned_at = 0;
  double died_at = 0;
  bool exited = false;
  int status = 0;
  bool stop_requested = false;
  bool killed_timeout = false;
  bool killed_hang = false;
  bool warm_expected = false;
  std::string path;  // "cold" | "warm" once ready
  std::string miss_reason;  // why it did not attach, when it asked and missed (a daemon's or its own word)
  std::deque<std::string> tail;
  std::optional<uint64_t> oom_before;
  FlagList flags;  // m_flags when it was started
  std::unique_ptr<EngineReport> report = std::make_unique<EngineReport>();  // what it said (the kind's new_report())
  bool strict = false;  // vllm-preload: started with ipc_cache fallback false
  bool in_pid_ns = false;      // PID 1 of its own PID namespace (spawned so, or restored): snapshottable
  std::string snapshot_id;     // restored from this snapshot (pid -1 while the helper restores it)
  double attach_since_unix = 0;  // attach records by its pid from this time on are its own (a standby attached early)
  std::string standby_level;     // released from a standby parked at this level
  std::optional<status::ArenaOutcomeStatus> arena;  // its `fastrestart-arena:` line, once it printed one
};

enum class StandbyPhase { kOff, kStarting, kParked, kStopping, kBackoff, kDisabled };

// The standby engine (supervisor_standby.cc, docs/standby.md): at most one, parked at its gate.
struct Supervisor::Standby {
  using Phase = StandbyPhase;
  Standby(Loop& loop, const RestartConfig& restart)
      : streak(restart), park_timer(loop), backoff_timer(loop), port_timer(loop) {}
  Phase phase = Phase::kOff;
  std::unique_ptr<Engine> proc;          // its process; becomes m_engine at the release
  UniqueFd gate;                         // our end of the gate socket
  std::unique_ptr<LineReader> gate_reader;  // declared after `gate`: destroyed before it
  FlagList flags;                        // m_flags when it was started
  uint64_t daemon_generation = 0;        // m_daemon_generation when it was started
  // Every file of the model when it was started (it read their config and tokenizer): standby_model_files.
  std::map<std::string, FileIdentity> checkpoint;
  std::map<std::string, std::string> launch;  // the config it was started from besides its flags, by key
  double parked_at = 0;                  // when this one parked; 0 until it does
  std::string stop_reason;               // why it is being stopped (kStopping)
  std::map<std::string, double> used_before;  // per GPU, at its spawn: where NVML lists no processes, what it holds is used minus this
  uint64_t gpu_bytes = 0;                // the sum of held_by_gpu while parked
  // Per GPU, what the last parked standby's processes held, re-measured at every park and status: with
  // reserve_mib = 0, a warmed standby's reserve on that GPU. Kept across its release (the next one's too).
  std::map<std::string, uint64_t> held_by_gpu;
  uint64_t spawns = 0, releases = 0;
  StandbyStreak streak;                  // failures in a row, the backoff, why the path is off (standby/streak.h)
  std::map<std::string, uint64_t> failures;  // by reason
  std::string last_failure;
  double released_at = 0, released_after_death_s = -1;  // the last release, for its timeline
  std::optional<double> release_to_ready_s, death_to_ready_s;
  Timer park_timer, backoff_timer, port_timer;
};

struct Supervisor::PendingReload {
  FlagList new_flags, old_flags;
  bool cold = false;
  double started = 0;
  bool rolled_back = false;
  bool unpersisted = false;  // rolled back because the new flags could not be written to flags.json
  std::string rollback_reason;
  std::vector<std::shared_ptr<std::promise<nlohmann::json>>> waiters;
};

}  // namespace fr::supervisor
