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
  set(S::kLoading, E::kStopRequested, to(S::kStopping, {A::kNotifyStopping, A::kStopDaemons}));
  set(S::kLoading, E::kColdReloadRequested, to(S::kLoading, {A::kReloadDaemons}));

  set(S::kStarting, E::kEngineReady, to(S::kReady, {A::kNotifyReady}));
  set(S::kStarting, E::kEngineExited, to(S::kDraining, {A::kClassifyExit, A::kWaitDrain}));
  set(S::kStarting, E::kStartTimeout, to(S::kDraining, {A::kKillEngine}));
  set(S::kStarting, E::kRestartRequested, to(S::kDraining, {A::kStopEngine}));
  set(S::kStarting, E::kColdReloadRequested, to(S::kDraining, {A::kStopEngine}));
  set(S::kStarting, E::kStopRequested, to(S::kStopping, {A::kNotifyStopping, A::kStopEngine}));
  // The path cold asked for fresh daemons: no engine runs yet; the daemons' readiness starts it.
  set(S::kStarting, E::kFreshDaemonsNeeded, to(S::kLoading, {A::kReloadDaemons}));

  set(S::kReady, E::kEngineExited, to(S::kDraining, {A::kClassifyExit, A::kWaitDrain}));
  set(S::kReady, E::kHung, to(S::kDraining, {A::kKillEngine}));
  set(S::kReady, E::kRestartRequested, to(S::kDraining, {A::kStopEngine}));
  set(S::kReady, E::kColdReloadRequested, to(S::kDraining, {A::kStopEngine}));
  set(S::kReady, E::kStopRequested, to(S::kStopping, {A::kNotifyStopping, A::kStopEngine}));

  // Draining: the engine exited (or is being stopped/killed). kEngineExited arrives here after a
  // stop or kill we asked for; the drain then decides what comes next.
  set(S::kDraining, E::kEngineExited, to(S::kDraining, {A::kClassifyExit, A::kWaitDrain}));
  set(S::kDraining, E::kDrainedRestart, to(S::kBackoff, {A::kScheduleBackoff}));
  set(S::kDraining, E::kDrainedColdRestart, to(S::kLoading, {A::kReloadDaemons}));
  set(S::kDraining, E::kDrainedGiveUp, to(S::kFailed, {A::kNotifyFailed, A::kStopDaemons}));
  set(S::kDraining, E::kStopRequested, to(S::kStopping, {A::kNotifyStopping, A::kStopEngine}));

  set(S::kBackoff, E::kBackoffElapsed, to(S::kStarting, {A::kStartEngine}));
  set(S::kBackoff, E::kRestartRequested, to(S::kStarting, {A::kStartEngine}));
  set(S::kBackoff, E::kColdReloadRequested, to(S::kLoading, {A::kReloadDaemons}));
  set(S::kBackoff, E::kStopRequested, to(S::kStopping, {A::kNotifyStopping, A::kStopDaemons}));

  // Stopping: engine first (kStopEngine already sent), daemons only once it is gone (brief decision 9).
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

}  // namespace

std::optional<Transition> transition(State s, Event e) {
  static const auto table = build();
  const Cell& c = table[static_cast<int>(s)][static_cast<int>(e)];
  if (!c.valid) return std::nullopt;
  return c.t;
}

const char* state_name(State s) {
  static constexpr const char* k[] = {"loading", "starting", "ready", "draining", "backoff", "stopping", "failed", "stopped"};
  return k[static_cast<int>(s)];
}

const char* event_name(Event e) {
  static constexpr const char* k[] = {"daemons_ready", "daemons_failed", "engine_ready", "engine_exited",
                                      "start_timeout", "hung", "drained_restart", "drained_cold_restart",
                                      "drained_give_up", "backoff_elapsed", "restart_requested",
                                      "cold_reload_requested", "stop_requested", "daemons_stopped",
                                      "fresh_daemons_needed"};
  return k[static_cast<int>(e)];
}

const char* action_name(Action a) {
  static constexpr const char* k[] = {"start_daemons", "reload_daemons", "start_engine", "stop_engine",
                                      "kill_engine", "classify_exit", "wait_drain", "schedule_backoff",
                                      "notify_ready", "notify_stopping", "notify_failed", "stop_daemons", "exit"};
  return k[static_cast<int>(a)];
}

}  // namespace fr::supervisor
