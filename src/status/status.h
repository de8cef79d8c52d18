// The supervisor's status (docs/supervisor.md, "Control protocol"; docs/health.md) as one typed struct and its
// codec. Supervisor::status_json() fills it and encodes it; fastrestartctl and /metrics decode it. The wire
// form is the JSON documented there, unchanged. Decoding keeps defaults for absent fields (an older or newer
// peer) and fails on a mistyped one, naming it ("status.engine.pid: not an integer"), or on a row present
// without the one field it means nothing without ("status.last_exit.cause: missing").
//
// A few parts keep their JSON form because another component owns their shape: the engine kind's report
// (`engine.vllm`, the vLLM adapter's VllmReport), `rollbacks.recent` and `snapshot` (docs/snapshot.md).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "protocol/daemon_status.h"

namespace fr::status {

struct EngineStatus {
  int64_t pid = 0;
  double uptime_s = 0;
  std::string path;
  std::string snapshot_id;
  std::vector<std::string> flags;  // redacted
  bool running = false;
  // Where fastrestartd's readiness and health checks reach it: "private 127.0.0.1:N" (its private endpoint,
  // docs/listen-socket.md), "public", or "public (why not private)".
  std::string readiness_endpoint;
  nlohmann::json vllm;  // engine.kind = vllm: what the engine reported; null (omitted) for other kinds
};

// A daemon row's progress: the sum over its entries, in the daemon's own struct and codec (elapsed_s unset).
using DaemonProgressStatus = proto::DaemonProgress;

// `vllm preload`'s row adds these (docs/vllm.md).
struct PreloadDetails {
  std::string health;
  std::vector<std::string> argv;
  std::vector<std::string> watched_files;
};

// One KV arena a native daemon holds (docs/weightd.md, "KV arenas"): the engine's KV cache, counted
// inside the engine's share of its GPU, not as memory held outside it (docs/supervisor.md, "KV arenas").
// The daemon's own row, as its status reply has it (pool_bytes is what is counted); on fastrestartd's
// wire last_wait_s is "waited_s".
using ArenaStatus = proto::DaemonArenaStatus;

struct DaemonRowStatus {
  std::string gpu;  // "host", a GPU index, or "vllm-preload"
  std::string kind;  // empty (omitted) for native daemons
  int64_t pid = 0;
  std::optional<std::string> socket;  // native daemons
  std::string state;  // loading | ready | failed | dead | stopped
  std::string error;
  uint64_t held_bytes = 0;  // weights: held outside the engine
  uint64_t entries = 0;
  DaemonProgressStatus progress;
  uint64_t arena_bytes = 0;  // the sum of arenas[].pool_bytes: the daemon's memory inside the engine's share
  std::vector<ArenaStatus> arenas;
  std::optional<PreloadDetails> preload;
};

struct MemoryRowStatus {
  std::string gpu;
  std::optional<std::string> error;  // NVML could not read the GPU: nothing else is set
  std::string uuid;
  std::string name;
  uint64_t total_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t budget_bytes = 0;
  uint64_t daemon_held_bytes = 0;  // the daemon's memory outside the engine: all of it but its arenas
  uint64_t arena_bytes = 0;        // the daemon's KV arenas on this GPU: inside the engine's share
  // What this GPU's share leaves for a warmed standby: standby.reserve_mib, or what the standby's own
  // processes held on this GPU at its last park (docs/standby.md, "Memory"). 0 without one.
  uint64_t standby_reserve_bytes = 0;
  // The engine's share of this GPU (the rank on it is told it in FASTRESTART_GPU_MEMORY_UTILIZATION):
  // memory.utilization minus what the daemon holds (zero_copy) and a warmed standby's reserve.
  std::optional<double> engine_share;
  // The share in bytes, exactly (floor(total x engine_share)), and what it leaves the engine beyond its
  // arenas (engine_share_bytes - arena_bytes, at least 0). Set with engine_share.
  std::optional<uint64_t> engine_share_bytes;
  std::optional<uint64_t> engine_own_bytes;
};

// What the current (or last) engine said about its KV arena as it started: its `fastrestart-arena:` line
// (docs/supervisor.md, "KV arenas"), which supervisor::parse_arena_line reads into this struct. Absent
// until an engine prints one; cleared at every engine spawn.
struct ArenaOutcomeStatus {
  std::string outcome;  // leased | fallback
  int64_t pid = 0;      // the engine that printed it
  double unix_time = 0;
  // leased: the arena's name and size, the lease's wait for the previous holder, the swap's own time, and
  // the lease's generation. Zero/empty for a fallback.
  std::string name;
  uint64_t bytes = 0;
  double waited_s = 0;
  double swap_s = 0;
  uint64_t generation = 0;
  std::string reason;  // fallback: why the engine allocates its KV cache itself; empty when leased
};

// One start path asked at the current (or last) engine start.
struct StartAttemptStatus {
  std::string path;
  std::string outcome;  // started | skipped | failed | waiting
  std::optional<std::string> reason;  // a code; with detail
  std::string detail;
};

struct HistogramStatus {
  std::vector<std::pair<double, uint64_t>> buckets;  // [le, cumulative count]
  uint64_t count = 0;
  double sum = 0;
};

struct StartPathCount {
  std::string path, outcome, reason;
  uint64_t count = 0;
};

struct SnapshotCounts {
  uint64_t created = 0, create_failures = 0, restored = 0, fallbacks = 0;
};

struct MetricsStatus {
  std::map<std::string, HistogramStatus> time_to_ready;  // by path
  uint64_t attaches_hit = 0, attaches_fallback = 0, attaches_none = 0;
  std::map<std::string, uint64_t> attach_misses;  // by reason
  uint64_t reloads_warm = 0, reloads_cold = 0, reloads_rolled_back = 0;
  std::vector<StartPathCount> start_paths;
  std::map<std::string, uint64_t> rollbacks;  // by cause
  std::optional<SnapshotCounts> snapshots;
};

// The last engine's exit (`last_exit`, docs/supervisor.md): its cause (classify.h's names) and detail. An
// engine that never ran (its spawn failed) has no pid, uptime nor death time.
struct LastExitStatus {
  std::string cause;  // required on the wire
  std::string detail;
  int64_t unix_time = 0;
  std::optional<int64_t> pid;
  std::optional<double> uptime_s;
  std::optional<double> died_at_s;  // fastrestartd's reap, CLOCK_MONOTONIC (the clock of last_start.ready_at_s)
  std::optional<bool> was_ready;
};

// The last start that became ready (`last_start`, docs/supervisor.md, "Start paths"): the path it took,
// its clocks, and each listed path's answer. The optional members are present only when they apply.
struct LastStartStatus {
  std::string path;                  // required on the wire
  double time_to_ready_s = 0;        // from the engine's exec (or a standby's release)
  double since_previous_exit_s = 0;  // from the reap of the engine before it (time_to_ready_s without one)
  double ready_at_s = 0;             // READY, CLOCK_MONOTONIC
  int64_t unix_time = 0;
  int64_t pid = 0;
  std::vector<StartAttemptStatus> start_paths;
  std::optional<std::string> snapshot_id;    // restored from this snapshot
  std::optional<std::string> expected;       // "warm" when the warm path loaded from disk anyway
  std::optional<std::string> warm_miss;      // and why
  std::optional<std::string> standby_level;  // a released standby's level
};

// The standby engine (docs/standby.md, "Status and metrics"); absent unless restart.start lists "standby".
struct StandbyStatus {
  std::string state;   // off | starting | parked | stopping | backoff | disabled
  std::string level;   // pre_gpu | warmed
  int64_t pid = 0;     // 0 while none runs
  double age_s = 0;    // since its spawn
  uint64_t gpu_bytes = 0;      // used on its GPUs after it parked, minus before it started
  uint64_t reserve_bytes = 0;  // what the engine's budget leaves for it (warmed)
  uint64_t spawns = 0;
  uint64_t releases = 0;
  std::map<std::string, uint64_t> failures;  // by reason: never_parked, died, listening, protocol
  std::string disabled;  // why the path is off until the flags change; empty while it is on
  std::string last_failure;
  int64_t failures_in_row = 0;  // failed standbys since the last that stayed parked restart.reset_after_s or was released
  double backoff_s = 0;     // while in backoff: the delay before the next spawn
  // The last release's timeline: the engine's death (as reaped), the release, readiness passed.
  std::optional<double> death_to_release_s;
  std::optional<double> release_to_ready_s;
  std::optional<double> death_to_ready_s;
};

// The front's request counters (docs/front.md, "Status"), summed over every front fastrestartd started.
struct FrontRequestsStatus {
  uint64_t received = 0, answered = 0, held = 0, held_now = 0, resent = 0, continued = 0;
  uint64_t lost = 0;  // received by a front that died and not answered, rejected or failed in its last status file
  std::map<std::string, uint64_t> rejected;  // answered by the front itself, by HTTP status
  std::map<std::string, uint64_t> failed;    // not answered by the engine, by reason
};

// fastrestart-front under fastrestartd (engine.listen = "front"; docs/front.md); absent with other modes.
struct FrontStatus {
  std::string state;        // running | backoff | stopping | stopped
  int64_t pid = 0;          // 0 while none runs
  std::string upstream;     // "127.0.0.1:<port>": the engines' socket it forwards to
  uint64_t restarts = 0;    // after exits fastrestartd did not ask for
  std::string last_exit;    // "signal 9 (Killed)", "exit code 2", ... ; empty before any
  uint64_t connections = 0; // client connections open now
  FrontRequestsStatus requests;
};

struct RollbacksStatus {
  uint64_t count = 0;
  std::map<std::string, uint64_t> by_cause;
  std::vector<nlohmann::json> recent;  // {unix_time, cause, detail, rejected_flags}
};

struct SupervisorStatus {
  std::string name;
  std::string config;
  std::string state;
  std::string status_text;
  double uptime_s = 0;
  std::optional<EngineStatus> engine;  // null while no engine runs
  std::vector<std::string> flags;      // redacted
  std::map<std::string, uint64_t> restarts;  // by cause
  RollbacksStatus rollbacks;
  std::optional<LastExitStatus> last_exit;    // null before any exit
  std::optional<LastStartStatus> last_start;  // null before any READY
  std::vector<StartAttemptStatus> start_paths;
  std::vector<DaemonRowStatus> daemons;
  std::vector<MemoryRowStatus> memory;
  double memory_utilization = 0;
  // Why the last engine start was refused: a GPU's share below memory.min_share, with its figures.
  std::optional<std::string> engine_share_refused;
  std::optional<ArenaOutcomeStatus> arena_outcome;
  double backoff_s = 0;
  std::string failure;
  bool reload_in_progress = false;
  nlohmann::json snapshot;
  std::optional<StandbyStatus> standby;
  std::optional<FrontStatus> front;
  MetricsStatus metrics;
};

nlohmann::json to_json(const SupervisorStatus& s);
nlohmann::json to_json(const DaemonRowStatus& d);
nlohmann::json to_json(const StartAttemptStatus& a);
nlohmann::json to_json(const StandbyStatus& s);
nlohmann::json to_json(const FrontStatus& f);
nlohmann::json to_json(const ArenaOutcomeStatus& a);
nlohmann::json to_json(const LastExitStatus& e);
nlohmann::json to_json(const LastStartStatus& s);
// `where` names the object in errors ("status").
Result<SupervisorStatus> supervisor_status_from_json(const nlohmann::json& j, const std::string& where = "status");

}  // namespace fr::status
