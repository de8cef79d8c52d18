// The standby part (docs/standby.md): at most one copy of the engine, started once the live engine is
// ready, that does its slow GPU-free work (and at level warmed its attach and warm-up) and parks at a
// gate. It owns its process group, the gate, the level, the reserve it leaves on each GPU, its failure
// streak and its counters, and reaches the supervisor only through its StandbyHost. It serves the start
// path "standby" as its StartPart: start() opens the gate and hands its process over as the live engine
// (StandbyHost::adopt_engine). Its phases are its own, never the lifecycle's state. Loop thread only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/fd.h"
#include "common/file_identity.h"
#include "status/status.h"
#include "supervisor/engine.h"
#include "supervisor/loop.h"
#include "supervisor/standby/standby_host.h"
#include "supervisor/standby/streak.h"
#include "supervisor/start/part.h"

namespace fr::supervisor {

enum class StandbyPhase { kOff, kStarting, kParked, kStopping, kBackoff, kDisabled };

class Standby final : public Part {
 public:
  // basics.listen: the socket a standby holds without accepting until its release (kNoListen: none).
  // `gpus`: the GPU probe (its memory before a spawn and at a park); it outlives the part.
  Standby(StandbyHost& host, const PartBasics& basics, GpuProbe& gpus);
  ~Standby() override;

  // StartPart: the path "standby". refusal: nullopt while a standby is parked on the current flags,
  // config, model files and (at warmed) daemons. start: the release; an error when the gate does not take
  // it (the standby is then killed and counted as failed).
  std::optional<StartRefusal> refusal() const override;
  Status start() override;

  bool wanted() const;  // restart.start lists "standby"
  // After the engine is ready, or when something it depends on changed (a re-read, the end of a
  // backoff): starts one on the current flags if none runs, replaces one that is stale.
  void maybe_spawn();
  // Stops its group (the gate is told to exit first, then SIGTERM, SIGKILL after a grace); none is
  // started again until maybe_spawn. A pending respawn is cancelled.
  void discard(const std::string& why);
  // Before the daemons stop (a warmed standby maps their weights): discards it, and true when its group
  // still runs; StandbyHost::standby_gone follows once it is gone.
  bool stop_before_daemons(const std::string& why);
  // A reaped child: true when it was the standby's process (its exit is then handled: a failure counts in
  // the streak and a successor follows a backoff).
  bool on_exit(pid_t pid, int status) override;
  void close() override;  // the loop ends: its process record, gate and timers go

  bool alive() const;
  std::string stale() const;  // why the standby no longer matches a start now ("" when it does)
  void add_known_pids(std::set<pid_t>& known) const override;
  // After READY of an engine released from a standby: its timeline.
  void after_ready(double since_release);
  std::optional<status::StandbyStatus> status() const;  // nullopt unless wanted()
  // Part: the path tag; at every READY, a released engine's timeline and then one standby behind the
  // engine (maybe_spawn, never before it is ready); status "standby" and the memory rows' reserve.
  StartPath path() const override { return StartPath::kStandby; }
  void after_ready(const ReadyFacts& ready) override;
  void fill_status(status::SupervisorStatus& st) const override;

  // Memory (docs/standby.md, "Memory"). reserve_bytes: what a GPU's share leaves for a warmed standby
  // (standby.reserve_mib, else what the last parked one held there). present_bytes: what a running
  // standby may hold on `gpu` now, for the leak check (0 when none runs). measure_memory: what a parked
  // standby's processes hold on each GPU now (its reserve from then on); `at_park`: where the probe gives
  // no per-process figures, used memory minus at its spawn stands in, only right at the park.
  uint64_t reserve_bytes(const std::string& gpu) const;
  uint64_t present_bytes(const std::string& gpu) const;
  void measure_memory(bool at_park);

 private:
  using Phase = StandbyPhase;
  void spawn();
  void on_gate_line(const std::string& line);
  void on_gate_closed();
  void on_parked();
  void failed(const std::string& reason, const std::string& detail);
  void note_failure(const std::string& what);  // counts it in the streak, logs a disable
  void retry_later();                          // kBackoff, then a spawn after the backoff
  std::map<std::string, FileIdentity> model_files() const;

  StandbyHost& m_host;
  Loop& m_loop;
  const Config& m_cfg;
  const ListenHandoff& m_listen;
  GpuProbe& m_gpus;
  bool m_created = false;                // maybe_spawn ran once (an engine was ready with the path listed)
  Phase m_phase = Phase::kOff;
  std::unique_ptr<Engine> m_proc;        // its process; the live engine's record at the release
  UniqueFd m_gate;                       // our end of the gate socket
  std::unique_ptr<LineReader> m_gate_reader;  // declared after m_gate: destroyed before it
  FlagList m_flags;                      // the engine's flags when it was started
  uint64_t m_daemon_generation = 0;      // the daemons' generation when it was started
  // Every file of the model when it was started (it read their config and tokenizer).
  std::map<std::string, FileIdentity> m_checkpoint;
  std::map<std::string, std::string> m_launch;  // the config it was started from besides its flags, by key
  double m_parked_at = 0;                // when this one parked; 0 until it does
  std::string m_stop_reason;             // why it is being stopped (kStopping)
  bool m_then_daemons = false;           // stop_before_daemons: standby_gone at its exit
  std::map<std::string, double> m_used_before;  // per GPU, at its spawn: used memory, where NVML lists no processes
  uint64_t m_gpu_bytes = 0;              // the sum of m_held_by_gpu while parked
  // Per GPU, what the last parked standby's processes held, re-measured at every park and status: with
  // reserve_mib = 0, a warmed standby's reserve on that GPU. Kept across its release (the next one's too).
  std::map<std::string, uint64_t> m_held_by_gpu;
  uint64_t m_spawns = 0, m_releases = 0;
  StandbyStreak m_streak;                // failures in a row, the backoff, why the path is off (streak.h)
  std::map<std::string, uint64_t> m_failures;  // by reason
  std::string m_last_failure;
  double m_released_at = 0, m_released_after_death_s = -1;  // the last release, for its timeline
  std::optional<double> m_release_to_ready_s, m_death_to_ready_s;
  Timer m_park_timer, m_backoff_timer, m_port_timer;
};

}  // namespace fr::supervisor
