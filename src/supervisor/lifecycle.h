// The supervisor's lifecycle as an explicit state x event table (after s6-supervise; ARCHITECTURE.md,
// "The lifecycle table").
//
// The table is pure: given a state and an event it names the next state and the actions to run, in order.
// Every state change of the Supervisor happens here: its callbacks only record facts and raise events.
// Guards that need facts (has the crash loop limit been reached? does the reload touch the daemons?) are
// evaluated by the Supervisor before it raises the event, so they become distinct events here. The table
// is printed in docs/supervisor.md (render_table_markdown(); a test compares the two) and every row has a
// unit test (tests/supervisor/lifecycle_test.cc).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace fr::supervisor {

enum class State {
  kLoading,    // weight daemons starting / preloading (or reloading)
  kStarting,   // the engine is being started on a start path; readiness not yet proven
  kReady,      // engine passed its readiness request
  kDraining,   // the engine is gone or going; waiting for its process group and GPU memory; then the policy decides
  kReloading,  // draining, then the weight daemons are reloaded (cold reload, preload died, checkpoint changed)
  kHolding,    // draining, then held (stop-engine)
  kHeld,       // stop-engine: no engine until start-engine (or a reload)
  kBackoff,    // waiting before the next start
  kStopping,   // SIGTERM: engine first, then daemons
  kFailed,     // gave up (crash loop); engine and daemons are being or have been stopped
  kStopped,    // everything stopped; the loop ends
};
inline constexpr int kStateCount = 11;

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
  kRestartRequested, // fastrestartctl restart / start-engine / reload (engine only)
  kColdReloadRequested,  // reload whose flags change what the daemons hold
  kStopRequested,    // SIGTERM / SIGINT
  kDaemonsStopped,   // every daemon we stopped is gone
  kFreshDaemonsNeeded,  // the start path chosen (cold) wants the daemons reloaded before the engine starts
  kHoldRequested,    // fastrestartctl stop-engine
  kPreloadDied,      // `vllm preload` exited unexpectedly
  kCheckpointChanged,  // the checkpoint files changed under the preload (dev, inode, size, mtime, ctime)
  kSnapshotCreated,  // a snapshot create job ended: a start that waited for it goes on
};
inline constexpr int kEventCount = 19;

enum class Action {
  kStartDaemons,     // spawn one weightd per GPU (preloading), or `vllm preload`
  kReloadDaemons,    // stop the daemons (kDaemonsStopped in kLoading then starts them again: cold cache)
  kStartEngine,      // walk restart.start and start the engine on the first path that can serve
  kStopEngine,       // SIGTERM the engine's group; SIGKILL after the grace period
  kKillEngine,       // SIGKILL the engine's group at once (hung, start timeout)
  kClassifyExit,     // record why the engine exited
  kWaitDrain,        // poll until the group is gone and GPU memory is back to the daemons' bytes
  kScheduleBackoff,
  kCancelBackoff,
  kNotifyReady,      // READY=1 + STATUS=
  kNotifyHeld,       // STATUS= engine stopped by the operator
  kNotifyStopping,   // STOPPING=1
  kNotifyFailed,     // STATUS= with the give-up reason
  kStopDaemons,
  kExit,
};
inline constexpr int kActionCount = 15;

struct Transition {
  State next;
  std::vector<Action> actions;
};

// nullopt: the event is ignored in that state (logged at debug level by the caller).
std::optional<Transition> transition(State s, Event e);

const char* state_name(State s);
const char* event_name(Event e);
const char* action_name(Action a);
// The state as status, /metrics and the probes name it: kReloading and kHolding are "draining".
const char* reported_state_name(State s);

// Questions about a state, answered here so that no caller compares states itself.
bool is_terminal(State s);           // stopping, failed, stopped: no start, no reload
bool awaits_daemons(State s);        // loading: the daemons' readiness decides what comes next

// The table as a markdown table (state | event | next | actions), in state and event order.
std::string render_table_markdown();

}  // namespace fr::supervisor
