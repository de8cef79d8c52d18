#include "supervisor/lifecycle.h"

#include <array>

namespace fr::supervisor {
namespace {

using A = Action;
using S = State;
using E = Event;

struct Cell {
  bool valid = false;
  Transition t{S::kStopped, {}};
};

Cell to(S next, std::vector<A> actions = {}) { return Cell{true, Transition{next, std::move(actions)}}; }

// One row per state, one column per event. Reading a row tells everything a state reacts to.
std::array<std::array<Cell, kEventCount>, kStateCount> build() {
  std::array<std::array<Cell, kEventCount>, kStateCount> t{};
  auto set = [&](S s, E e, Cell c) { t[static_cast<int>(s)][static_cast<int>(e)] = std::move(c); };

  // Loading: daemons come up; an engine can always fall back to a disk load, so a daemon failure
  // still starts the engine (its attach misses and says why).
  set(S::kLoading, E::kDaemonsReady, to(S::kStarting, {A::kStartEngine}));
  set(S::kLoading, E::kDaemonsFailed, to(S::kStarting, {A::kStartEngine}));
  set(S::kLoading, E::kPreloadDied, to(S::kStarting, {A::kStartEngine}));
  set(S::kLoading, E::kDaemonsStopped, to(S::kLoading, {A::kStartDaemons}));  // a reload stopped them
  set(S::kLoading, E::kColdReloadRequested, to(S::kLoading, {A::kReloadDaemons}));
  set(S::kLoading, E::kHoldRequested, to(S::kHeld, {A::kNotifyHeld}));
  set(S::kLoading, E::kStopRequested, to(S::kStopping, {A::kNotifyStopping, A::kStopDaemons}));

  set(S::kStarting, E::kEngineReady, to(S::kReady, {A::kNotifyReady}));
  set(S::kStarting, E::kEngineExited, to(S::kDraining, {A::kClassifyExit, A::kWaitDrain}));
  set(S::kStarting, E::kStartTimeout, to(S::kDraining, {A::kKillEngine}));
  set(S::kStarting, E::kRestartRequested, to(S::kDraining, {A::kStopEngine}));
  set(S::kStarting, E::kColdReloadRequested, to(S::kReloading, {A::kStopEngine}));
  set(S::kStarting, E::kPreloadDied, to(S::kReloading, {A::kStopEngine}));
  set(S::kStarting, E::kCheckpointChanged, to(S::kReloading, {A::kStopEngine}));
  set(S::kStarting, E::kHoldRequested, to(S::kHolding, {A::kStopEngine}));
  set(S::kStarting, E::kStopRequested, to(S::kStopping, {A::kNotifyStopping, A::kStopEngine}));
  // The path cold asked for fresh daemons: no engine runs yet; the daemons' readiness starts it.
  set(S::kStarting, E::kFreshDaemonsNeeded, to(S::kLoading, {A::kReloadDaemons}));
  // The start waited for a snapshot being created: walk the paths again (snapshot restores it).
  set(S::kStarting, E::kSnapshotCreated, to(S::kStarting, {A::kStartEngine}));

  set(S::kReady, E::kEngineExited, to(S::kDraining, {A::kClassifyExit, A::kWaitDrain}));
  set(S::kReady, E::kHung, to(S::kDraining, {A::kKillEngine}));
  set(S::kReady, E::kRestartRequested, to(S::kDraining, {A::kStopEngine}));
  set(S::kReady, E::kColdReloadRequested, to(S::kReloading, {A::kStopEngine}));
  // An engine mapped to the preload's weights loses them with it; a changed checkpoint makes them stale.
  set(S::kReady, E::kPreloadDied, to(S::kReloading, {A::kStopEngine}));
  set(S::kReady, E::kCheckpointChanged, to(S::kReloading, {A::kStopEngine}));
  set(S::kReady, E::kHoldRequested, to(S::kHolding, {A::kStopEngine}));
  set(S::kReady, E::kStopRequested, to(S::kStopping, {A::kNotifyStopping, A::kStopEngine}));

  // Draining: the engine exited (or is being stopped/killed). kEngineExited arrives here after a
  // stop or kill we asked for; the drain then decides what comes next.
  set(S::kDraining, E::kEngineExited, to(S::kDraining, {A::kClassifyExit, A::kWaitDrain}));
  set(S::kDraining, E::kDrainedRestart, to(S::kBackoff, {A::kScheduleBackoff}));
  set(S::kDraining, E::kDrainedColdRestart, to(S::kLoading, {A::kReloadDaemons}));
  set(S::kDraining, E::kDrainedGiveUp, to(S::kFailed, {A::kNotifyFailed, A::kStopDaemons}));
  set(S::kDraining, E::kColdReloadRequested, to(S::kReloading, {}));
  set(S::kDraining, E::kPreloadDied, to(S::kReloading, {}));
  set(S::kDraining, E::kCheckpointChanged, to(S::kReloading, {}));
  set(S::kDraining, E::kHoldRequested, to(S::kHolding, {}));
  set(S::kDraining, E::kStopRequested, to(S::kStopping, {A::kNotifyStopping, A::kStopEngine}));

  // Reloading: as draining, but the daemons are reloaded before the next start (unless it gives up).
  set(S::kReloading, E::kEngineExited, to(S::kReloading, {A::kClassifyExit, A::kWaitDrain}));
  set(S::kReloading, E::kDrainedRestart, to(S::kLoading, {A::kReloadDaemons}));
  set(S::kReloading, E::kDrainedColdRestart, to(S::kLoading, {A::kReloadDaemons}));
  set(S::kReloading, E::kDrainedGiveUp, to(S::kFailed, {A::kNotifyFailed, A::kStopDaemons}));
  set(S::kReloading, E::kHoldRequested, to(S::kHolding, {}));
  set(S::kReloading, E::kStopRequested, to(S::kStopping, {A::kNotifyStopping, A::kStopEngine}));

  // Holding: as draining, then held whatever the exit was (the operator asked for no engine).
  set(S::kHolding, E::kEngineExited, to(S::kHolding, {A::kClassifyExit, A::kWaitDrain}));
  set(S::kHolding, E::kDrainedRestart, to(S::kHeld, {A::kNotifyHeld}));
  set(S::kHolding, E::kDrainedColdRestart, to(S::kHeld, {A::kNotifyHeld}));
  set(S::kHolding, E::kDrainedGiveUp, to(S::kHeld, {A::kNotifyHeld}));
  set(S::kHolding, E::kRestartRequested, to(S::kDraining, {}));  // start-engine before the drain ended
  set(S::kHolding, E::kStopRequested, to(S::kStopping, {A::kNotifyStopping, A::kStopEngine}));

  // Held: no engine. The daemons keep their weights; one that changed under them is stopped, so the next
  // start (its path cold) loads them again.
  set(S::kHeld, E::kRestartRequested, to(S::kStarting, {A::kStartEngine}));
  set(S::kHeld, E::kColdReloadRequested, to(S::kLoading, {A::kReloadDaemons}));
  set(S::kHeld, E::kCheckpointChanged, to(S::kHeld, {A::kStopDaemons}));
  set(S::kHeld, E::kStopRequested, to(S::kStopping, {A::kNotifyStopping, A::kStopDaemons}));

  set(S::kBackoff, E::kBackoffElapsed, to(S::kStarting, {A::kStartEngine}));
  set(S::kBackoff, E::kRestartRequested, to(S::kStarting, {A::kStartEngine}));
  set(S::kBackoff, E::kColdReloadRequested, to(S::kLoading, {A::kReloadDaemons}));
  set(S::kBackoff, E::kPreloadDied, to(S::kLoading, {A::kCancelBackoff, A::kReloadDaemons}));
  set(S::kBackoff, E::kCheckpointChanged, to(S::kLoading, {A::kCancelBackoff, A::kReloadDaemons}));
  set(S::kBackoff, E::kHoldRequested, to(S::kHeld, {A::kCancelBackoff, A::kNotifyHeld}));
  set(S::kBackoff, E::kStopRequested, to(S::kStopping, {A::kNotifyStopping, A::kStopDaemons}));

  // Stopping: engine first (kStopEngine already sent), daemons only once it is gone (ARCHITECTURE.md,
  // "Stop order": the engine may map the daemons' memory until its last process exits).
  set(S::kStopping, E::kEngineExited, to(S::kStopping, {A::kClassifyExit, A::kWaitDrain}));
  set(S::kStopping, E::kDrainedRestart, to(S::kStopping, {A::kStopDaemons}));
  set(S::kStopping, E::kDrainedColdRestart, to(S::kStopping, {A::kStopDaemons}));
  set(S::kStopping, E::kDrainedGiveUp, to(S::kStopping, {A::kStopDaemons}));
  set(S::kStopping, E::kDaemonsStopped, to(S::kStopped, {A::kExit}));
  set(S::kStopping, E::kDaemonsReady, to(S::kStopping, {}));

  set(S::kFailed, E::kDaemonsStopped, to(S::kStopped, {A::kExit}));
  set(S::kFailed, E::kStopRequested, to(S::kFailed, {}));
  return t;
}

const std::array<std::array<Cell, kEventCount>, kStateCount>& table() {
  static const auto t = build();
  return t;
}

}  // namespace

std::optional<Transition> transition(State s, Event e) {
  const Cell& c = table()[static_cast<int>(s)][static_cast<int>(e)];
  if (!c.valid) return std::nullopt;
  return c.t;
}

const char* state_name(State s) {
  static constexpr const char* k[] = {"loading", "starting", "ready",    "draining", "reloading", "holding",
                                      "held",    "backoff",  "stopping", "failed",   "stopped"};
  static_assert(std::size(k) == kStateCount);
  return k[static_cast<int>(s)];
}

const char* reported_state_name(State s) {
  return s == State::kReloading || s == State::kHolding ? "draining" : state_name(s);
}

const char* event_name(Event e) {
  static constexpr const char* k[] = {"daemons_ready", "daemons_failed", "engine_ready", "engine_exited",
                                      "start_timeout", "hung", "drained_restart", "drained_cold_restart",
                                      "drained_give_up", "backoff_elapsed", "restart_requested",
                                      "cold_reload_requested", "stop_requested", "daemons_stopped",
                                      "fresh_daemons_needed", "hold_requested", "preload_died",
                                      "checkpoint_changed", "snapshot_created"};
  static_assert(std::size(k) == kEventCount);
  return k[static_cast<int>(e)];
}

const char* action_name(Action a) {
  static constexpr const char* k[] = {"start_daemons", "reload_daemons", "start_engine", "stop_engine",
                                      "kill_engine", "classify_exit", "wait_drain", "schedule_backoff",
                                      "cancel_backoff", "notify_ready", "notify_held", "notify_stopping",
                                      "notify_failed", "stop_daemons", "exit"};
  static_assert(std::size(k) == kActionCount);
  return k[static_cast<int>(a)];
}

bool is_terminal(State s) { return s == State::kStopping || s == State::kFailed || s == State::kStopped; }
bool awaits_daemons(State s) { return s == State::kLoading; }

std::string render_table_markdown() {
  std::string out = "| state | event | next | actions |\n| --- | --- | --- | --- |\n";
  for (int s = 0; s < kStateCount; ++s)
    for (int e = 0; e < kEventCount; ++e) {
      const Cell& c = table()[s][e];
      if (!c.valid) continue;
      std::string acts;
      for (Action a : c.t.actions) acts += (acts.empty() ? "" : ", ") + std::string(action_name(a));
      out += std::string("| ") + state_name(static_cast<State>(s)) + " | " + event_name(static_cast<Event>(e)) + " | " +
             state_name(c.t.next) + " | " + (acts.empty() ? "-" : acts) + " |\n";
    }
  return out;
}

}  // namespace fr::supervisor
