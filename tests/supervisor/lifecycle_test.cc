#include "supervisor/lifecycle.h"

#include <gtest/gtest.h>

namespace fr::supervisor {
namespace {

std::vector<Action> actions(State s, Event e) {
  auto t = transition(s, e);
  return t ? t->actions : std::vector<Action>{};
}

TEST(Lifecycle, ColdStartPath) {
  EXPECT_EQ(transition(State::kLoading, Event::kDaemonsReady)->next, State::kStarting);
  EXPECT_EQ(actions(State::kLoading, Event::kDaemonsReady), std::vector<Action>{Action::kStartEngine});
  EXPECT_EQ(transition(State::kStarting, Event::kEngineReady)->next, State::kReady);
  EXPECT_EQ(actions(State::kStarting, Event::kEngineReady), std::vector<Action>{Action::kNotifyReady});
}

TEST(Lifecycle, DaemonFailureStillStartsTheEngine) {
  EXPECT_EQ(transition(State::kLoading, Event::kDaemonsFailed)->next, State::kStarting);
}

TEST(Lifecycle, CrashGoesThroughDrainToBackoffThenStart) {
  EXPECT_EQ(transition(State::kReady, Event::kEngineExited)->next, State::kDraining);
  EXPECT_EQ(actions(State::kReady, Event::kEngineExited), (std::vector<Action>{Action::kClassifyExit, Action::kWaitDrain}));
  EXPECT_EQ(transition(State::kDraining, Event::kDrainedRestart)->next, State::kBackoff);
  EXPECT_EQ(transition(State::kBackoff, Event::kBackoffElapsed)->next, State::kStarting);
  EXPECT_EQ(actions(State::kBackoff, Event::kBackoffElapsed), std::vector<Action>{Action::kStartEngine});
}

TEST(Lifecycle, WarmFailuresEscalateToAColdReload) {
  EXPECT_EQ(transition(State::kDraining, Event::kDrainedColdRestart)->next, State::kLoading);
  EXPECT_EQ(actions(State::kDraining, Event::kDrainedColdRestart), std::vector<Action>{Action::kReloadDaemons});
}

TEST(Lifecycle, GiveUpStopsTheDaemonsAndExits) {
  EXPECT_EQ(transition(State::kDraining, Event::kDrainedGiveUp)->next, State::kFailed);
  EXPECT_EQ(actions(State::kDraining, Event::kDrainedGiveUp), (std::vector<Action>{Action::kNotifyFailed, Action::kStopDaemons}));
  EXPECT_EQ(transition(State::kFailed, Event::kDaemonsStopped)->next, State::kStopped);
}

TEST(Lifecycle, HangAndStartTimeoutKill) {
  EXPECT_EQ(actions(State::kReady, Event::kHung), std::vector<Action>{Action::kKillEngine});
  EXPECT_EQ(actions(State::kStarting, Event::kStartTimeout), std::vector<Action>{Action::kKillEngine});
  EXPECT_FALSE(transition(State::kReady, Event::kStartTimeout));
}

// Brief decision 9: the engine is stopped first; the daemons only after it has drained.
TEST(Lifecycle, StopIsEngineFirstDaemonsAfter) {
  for (State s : {State::kStarting, State::kReady, State::kDraining}) {
    auto t = transition(s, Event::kStopRequested);
    ASSERT_TRUE(t) << state_name(s);
    EXPECT_EQ(t->next, State::kStopping);
    EXPECT_EQ(std::count(t->actions.begin(), t->actions.end(), Action::kStopDaemons), 0) << state_name(s);
  }
  EXPECT_EQ(actions(State::kStopping, Event::kEngineExited), (std::vector<Action>{Action::kClassifyExit, Action::kWaitDrain}));
  EXPECT_EQ(actions(State::kStopping, Event::kDrainedRestart), std::vector<Action>{Action::kStopDaemons});
  EXPECT_EQ(transition(State::kStopping, Event::kDaemonsStopped)->next, State::kStopped);
  // With no engine running, stopping goes straight to the daemons.
  EXPECT_EQ(actions(State::kBackoff, Event::kStopRequested), (std::vector<Action>{Action::kNotifyStopping, Action::kStopDaemons}));
}

TEST(Lifecycle, ReloadsRestartTheEngineOrTheDaemons) {
  EXPECT_EQ(actions(State::kReady, Event::kRestartRequested), std::vector<Action>{Action::kStopEngine});
  EXPECT_EQ(actions(State::kReady, Event::kColdReloadRequested), std::vector<Action>{Action::kStopEngine});
  EXPECT_EQ(transition(State::kBackoff, Event::kColdReloadRequested)->next, State::kLoading);
}

TEST(Lifecycle, StoppingIgnoresRestartRequests) {
  EXPECT_FALSE(transition(State::kStopping, Event::kRestartRequested));
  EXPECT_FALSE(transition(State::kStopping, Event::kBackoffElapsed));
  EXPECT_FALSE(transition(State::kStopped, Event::kStopRequested));
}

TEST(Lifecycle, EveryStateAndEventHasAName) {
  for (int s = 0; s < kStateCount; ++s) EXPECT_STRNE(state_name(static_cast<State>(s)), "");
  for (int e = 0; e < kEventCount; ++e) EXPECT_STRNE(event_name(static_cast<Event>(e)), "");
}

}  // namespace
}  // namespace fr::supervisor
