// The supervisor's lifecycle as an explicit state x event table (style.md; after s6-supervise).
//
// The table is pure: given a state and an event it names the next state and the actions to run, in order.
// Guards that need facts (has the crash loop limit been reached? does the reload touch the daemons?) are
// evaluated by the Supervisor before it raises the event, so they become distinct events here. Unit tests
// drive the table without processes (tests/supervisor/lifecycle_test.cc).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace fr::supervisor {

enum class State {
  kLoading,    // weight daemons starting / preloading
  kStarting,   // engine spawned, readiness not yet proven
  kReady,      // engine passed its readiness request
  kDraining,   // the engine is gone or going; waiting for its process group and GPU memory
  kBackoff,    // waiting before the next start
  kStopping,   // SIGTERM: engine first, then daemons
  kFailed,     // gave up (crash loop); engine and daemons are being or have been stopped
  kStopped,    // everything stopped; the loop ends
};
inline constexpr int kStateCount = 8;

enum class Event {
  kDaemonsReady,     // every daemon holds its entry (or there are none)
  kDaemonsFailed,    // a daemon could not start or load
  kEngineReady,      // readiness request passed
  kEngineExited,     // the engine's main process exited (any reason)
  kStartTimeout,     // readiness did not pass within startup_timeout_s
  kHung,             // a running engine stopped answering /health
  kDrainedRestart,   // group gone, memory settled; policy says restart after a backoff
  kDrainedColdRestart,  // same, but the warm path keeps failing: reload the daemons cold first
  kDrainedGiveUp,    // group gone; policy says the crash loop limit is reached
  kBackoffElapsed,
  kRestartRequested, // fastrestartctl restart / reload (engine only)
  kColdReloadRequested,  // reload whose flags change what the daemons hold
  kStopRequested,    // SIGTERM / SIGINT
  kDaemonsStopped,
  kFreshDaemonsNeeded,  // the start path chosen (cold) wants the daemons reloaded before the engine starts
};
inline constexpr int kEventCount = 15;

enum class Action {
  kStartDaemons,     // spawn one weightd per GPU (preloading)
  kReloadDaemons,    // stop the daemons, then start them again (cold cache)
  kStartEngine,
  kStopEngine,       // SIGTERM the engine's group; SIGKILL after the grace period
  kKillEngine,       // SIGKILL the engine's group at once (hung, start timeout)
  kClassifyExit,     // record why the engine exited
  kWaitDrain,        // poll until the group is gone and GPU memory is back to the daemons' bytes
  kScheduleBackoff,
  kNotifyReady,      // READY=1 + STATUS=
  kNotifyStopping,   // STOPPING=1
  kNotifyFailed,     // STATUS= with the give-up reason
  kStopDaemons,
  kExit,
};

struct Transition {
  State next;
  std::vector<Action> actions;
};

// nullopt: the event is ignored in that state (logged at debug level by the caller).
std::optional<Transition> transition(State s, Event e);

const char* state_name(State s);
const char* event_name(Event e);
const char* action_name(Action a);

}  // namespace fr::supervisor
