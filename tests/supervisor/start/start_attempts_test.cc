// The record of a start's walk (start/attempts.h): what status, STATUS= and /metrics read of it.
#include <gtest/gtest.h>

#include "supervisor/start/attempts.h"

namespace fr::supervisor {
namespace {

TEST(StartAttempts, SkipsAndFailuresAreTheTextAndEveryAttemptIsCounted) {
  Stats stats;
  StartAttempts walk(stats);
  walk.record(StartPath::kStandby, "skipped", {"not_parked", "no standby is running"});
  walk.record(StartPath::kSnapshot, "failed", {"failed", "snapshot a1 not restored: x"});
  walk.record(StartPath::kWarm, "started", {});
  EXPECT_EQ(walk.text(), "skipped standby: no standby is running; failed snapshot: snapshot a1 not restored: x");
  const auto rows = walk.rows();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].path, "standby");
  EXPECT_EQ(rows[0].reason, "not_parked");
  EXPECT_FALSE(rows[2].reason) << "a start has no reason";
  ASSERT_NE(walk.last_on(StartPath::kSnapshot), nullptr);
  EXPECT_EQ(walk.last_on(StartPath::kSnapshot)->outcome, "failed");
  EXPECT_EQ(walk.last_on(StartPath::kCold), nullptr);
  status::SupervisorStatus st;
  stats.fill(st);
  EXPECT_EQ(st.metrics.start_paths.size(), 3u);
}

TEST(StartAttempts, AWaitBeforeAnyPathIsNotCounted) {
  Stats stats;
  StartAttempts walk(stats);
  walk.wait_first(StartPath::kSnapshot, {"snapshot_create", "waiting for the snapshot being created"});
  EXPECT_TRUE(walk.waiting("snapshot_create"));
  EXPECT_FALSE(walk.waiting("reloading_daemons"));
  EXPECT_EQ(walk.text(), "") << "a wait is neither a skip nor a failure";
  status::SupervisorStatus st;
  stats.fill(st);
  EXPECT_TRUE(st.metrics.start_paths.empty());
  walk.clear();
  EXPECT_FALSE(walk.waiting("snapshot_create"));
}

}  // namespace
}  // namespace fr::supervisor
