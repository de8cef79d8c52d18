#include "supervisor/lifecycle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>

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

// The engine is stopped first; the daemons only after it has drained (ARCHITECTURE.md, "Stop order").
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


// Every row of the table, as it must be: a changed row fails here, and a row added without a line here
// fails EveryRowIsListed.
struct Row {
  State s;
  Event e;
  State next;
  std::vector<Action> actions;
};

const std::vector<Row>& rows() {
  using S = State;
  using E = Event;
  using A = Action;
  static const std::vector<Row> r = {
      {S::kLoading, E::kDaemonsReady, S::kStarting, {A::kStartEngine}},
      {S::kLoading, E::kDaemonsFailed, S::kStarting, {A::kStartEngine}},
      {S::kLoading, E::kPreloadDied, S::kStarting, {A::kStartEngine}},
      {S::kLoading, E::kDaemonsStopped, S::kLoading, {A::kStartDaemons}},
      {S::kLoading, E::kColdReloadRequested, S::kLoading, {A::kReloadDaemons}},
      {S::kLoading, E::kHoldRequested, S::kHeld, {A::kNotifyHeld}},
      {S::kLoading, E::kStopRequested, S::kStopping, {A::kNotifyStopping, A::kStopDaemons}},
      {S::kStarting, E::kEngineReady, S::kReady, {A::kNotifyReady}},
      {S::kStarting, E::kEngineExited, S::kDraining, {A::kClassifyExit, A::kWaitDrain}},
      {S::kStarting, E::kStartTimeout, S::kDraining, {A::kKillEngine}},
      {S::kStarting, E::kRestartRequested, S::kDraining, {A::kStopEngine}},
      {S::kStarting, E::kColdReloadRequested, S::kReloading, {A::kStopEngine}},
      {S::kStarting, E::kPreloadDied, S::kReloading, {A::kStopEngine}},
      {S::kStarting, E::kCheckpointChanged, S::kReloading, {A::kStopEngine}},
      {S::kStarting, E::kHoldRequested, S::kHolding, {A::kStopEngine}},
      {S::kStarting, E::kStopRequested, S::kStopping, {A::kNotifyStopping, A::kStopEngine}},
      {S::kStarting, E::kFreshDaemonsNeeded, S::kLoading, {A::kReloadDaemons}},
      {S::kStarting, E::kSnapshotCreated, S::kStarting, {A::kStartEngine}},
      {S::kReady, E::kEngineExited, S::kDraining, {A::kClassifyExit, A::kWaitDrain}},
      {S::kReady, E::kHung, S::kDraining, {A::kKillEngine}},
      {S::kReady, E::kRestartRequested, S::kDraining, {A::kStopEngine}},
      {S::kReady, E::kColdReloadRequested, S::kReloading, {A::kStopEngine}},
      {S::kReady, E::kPreloadDied, S::kReloading, {A::kStopEngine}},
      {S::kReady, E::kCheckpointChanged, S::kReloading, {A::kStopEngine}},
      {S::kReady, E::kHoldRequested, S::kHolding, {A::kStopEngine}},
      {S::kReady, E::kStopRequested, S::kStopping, {A::kNotifyStopping, A::kStopEngine}},
      {S::kDraining, E::kEngineExited, S::kDraining, {A::kClassifyExit, A::kWaitDrain}},
      {S::kDraining, E::kDrainedRestart, S::kBackoff, {A::kScheduleBackoff}},
      {S::kDraining, E::kDrainedColdRestart, S::kLoading, {A::kReloadDaemons}},
      {S::kDraining, E::kDrainedGiveUp, S::kFailed, {A::kNotifyFailed, A::kStopDaemons}},
      {S::kDraining, E::kColdReloadRequested, S::kReloading, {}},
      {S::kDraining, E::kPreloadDied, S::kReloading, {}},
      {S::kDraining, E::kCheckpointChanged, S::kReloading, {}},
      {S::kDraining, E::kHoldRequested, S::kHolding, {}},
      {S::kDraining, E::kStopRequested, S::kStopping, {A::kNotifyStopping, A::kStopEngine}},
      {S::kReloading, E::kEngineExited, S::kReloading, {A::kClassifyExit, A::kWaitDrain}},
      {S::kReloading, E::kDrainedRestart, S::kLoading, {A::kReloadDaemons}},
      {S::kReloading, E::kDrainedColdRestart, S::kLoading, {A::kReloadDaemons}},
      {S::kReloading, E::kDrainedGiveUp, S::kFailed, {A::kNotifyFailed, A::kStopDaemons}},
      {S::kReloading, E::kHoldRequested, S::kHolding, {}},
      {S::kReloading, E::kStopRequested, S::kStopping, {A::kNotifyStopping, A::kStopEngine}},
      {S::kHolding, E::kEngineExited, S::kHolding, {A::kClassifyExit, A::kWaitDrain}},
      {S::kHolding, E::kDrainedRestart, S::kHeld, {A::kNotifyHeld}},
      {S::kHolding, E::kDrainedColdRestart, S::kHeld, {A::kNotifyHeld}},
      {S::kHolding, E::kDrainedGiveUp, S::kHeld, {A::kNotifyHeld}},
      {S::kHolding, E::kRestartRequested, S::kDraining, {}},
      {S::kHolding, E::kStopRequested, S::kStopping, {A::kNotifyStopping, A::kStopEngine}},
      {S::kHeld, E::kRestartRequested, S::kStarting, {A::kStartEngine}},
      {S::kHeld, E::kColdReloadRequested, S::kLoading, {A::kReloadDaemons}},
      {S::kHeld, E::kCheckpointChanged, S::kHeld, {A::kStopDaemons}},
      {S::kHeld, E::kStopRequested, S::kStopping, {A::kNotifyStopping, A::kStopDaemons}},
      {S::kBackoff, E::kBackoffElapsed, S::kStarting, {A::kStartEngine}},
      {S::kBackoff, E::kRestartRequested, S::kStarting, {A::kStartEngine}},
      {S::kBackoff, E::kColdReloadRequested, S::kLoading, {A::kReloadDaemons}},
      {S::kBackoff, E::kPreloadDied, S::kLoading, {A::kCancelBackoff, A::kReloadDaemons}},
      {S::kBackoff, E::kCheckpointChanged, S::kLoading, {A::kCancelBackoff, A::kReloadDaemons}},
      {S::kBackoff, E::kHoldRequested, S::kHeld, {A::kCancelBackoff, A::kNotifyHeld}},
      {S::kBackoff, E::kStopRequested, S::kStopping, {A::kNotifyStopping, A::kStopDaemons}},
      {S::kStopping, E::kEngineExited, S::kStopping, {A::kClassifyExit, A::kWaitDrain}},
      {S::kStopping, E::kDrainedRestart, S::kStopping, {A::kStopDaemons}},
      {S::kStopping, E::kDrainedColdRestart, S::kStopping, {A::kStopDaemons}},
      {S::kStopping, E::kDrainedGiveUp, S::kStopping, {A::kStopDaemons}},
      {S::kStopping, E::kDaemonsStopped, S::kStopped, {A::kExit}},
      {S::kStopping, E::kDaemonsReady, S::kStopping, {}},
      {S::kFailed, E::kDaemonsStopped, S::kStopped, {A::kExit}},
      {S::kFailed, E::kStopRequested, S::kFailed, {}},
  };
  return r;
}

class TableRow : public ::testing::TestWithParam<Row> {};

TEST_P(TableRow, IsAsSpecified) {
  const Row& r = GetParam();
  auto t = transition(r.s, r.e);
  ASSERT_TRUE(t) << state_name(r.s) << " x " << event_name(r.e);
  EXPECT_EQ(t->next, r.next) << state_name(r.s) << " x " << event_name(r.e) << " -> " << state_name(t->next);
  EXPECT_EQ(t->actions, r.actions) << state_name(r.s) << " x " << event_name(r.e);
}

INSTANTIATE_TEST_SUITE_P(Lifecycle, TableRow, ::testing::ValuesIn(rows()), [](const auto& row) {
  return std::string(state_name(row.param.s)) + "_" + event_name(row.param.e);
});

TEST(Lifecycle, EveryRowIsListed) {
  size_t valid = 0;
  for (int s = 0; s < kStateCount; ++s)
    for (int e = 0; e < kEventCount; ++e) valid += transition(static_cast<State>(s), static_cast<Event>(e)).has_value();
  EXPECT_EQ(valid, rows().size());
}

// docs/supervisor.md prints the table between two markers; it must be the table itself.
TEST(Lifecycle, TheDocPrintsTheTable) {
  std::ifstream f(std::string(FR_SOURCE_DIR) + "/docs/supervisor.md");
  std::string doc((std::istreambuf_iterator<char>(f)), {});
  const std::string begin = "<!-- lifecycle-table: generated by render_table_markdown(), checked by lifecycle_test -->\n",
                    end = "<!-- lifecycle-table end -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), render_table_markdown())
      << "docs/supervisor.md's table is out of date; it should read:\n" << render_table_markdown();
}

TEST(Lifecycle, StatePredicates) {
  for (State s : {State::kStopping, State::kFailed, State::kStopped}) EXPECT_TRUE(is_terminal(s)) << state_name(s);
  for (State s : {State::kLoading, State::kStarting, State::kReady, State::kDraining, State::kReloading, State::kHolding,
                  State::kHeld, State::kBackoff})
    EXPECT_FALSE(is_terminal(s)) << state_name(s);
  EXPECT_TRUE(awaits_daemons(State::kLoading));
  EXPECT_FALSE(awaits_daemons(State::kStarting));
  EXPECT_STREQ(reported_state_name(State::kReloading), "draining");
  EXPECT_STREQ(reported_state_name(State::kHolding), "draining");
  EXPECT_STREQ(reported_state_name(State::kHeld), "held");
}

}  // namespace
}  // namespace fr::supervisor
