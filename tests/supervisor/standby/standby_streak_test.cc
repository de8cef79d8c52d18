// The standby's failure streak (standby/streak.h): the backoff between spawns, the disable after
// standby.max_failures in a row, and what ends a streak.
#include <gtest/gtest.h>

#include "supervisor/standby/streak.h"

namespace fr::supervisor {
namespace {

Config streak_config() {
  Config c;
  c.restart.backoff_initial_s = 1;
  c.restart.backoff_multiplier = 2;
  c.restart.backoff_max_s = 60;
  c.restart.reset_after_s = 100;
  c.restart.crash_loop_limit = 2;  // the engine's give-up: not the standby's
  c.standby.max_failures = 3;
  return c;
}

FlagList streak_flags(std::vector<std::string> words) { return *FlagList::from_words(std::move(words), "flags"); }

TEST(StandbyStreak, EachFailureBacksOffLongerAndMaxFailuresInARowDisableThePath) {
  const Config c = streak_config();
  const FlagList flags = streak_flags({"--model", "m"});
  StandbyStreak s(c.restart);
  EXPECT_FALSE(s.fail(10, 0, "died before parking", c, flags));
  EXPECT_EQ(s.in_row(), 1);
  const double first = s.backoff_s();
  EXPECT_GT(first, 0);
  EXPECT_FALSE(s.fail(11, 0, "died before parking", c, flags));  // past crash_loop_limit: no give-up
  EXPECT_GT(s.backoff_s(), first);
  EXPECT_TRUE(s.disabled().empty());
  EXPECT_TRUE(s.fail(12, 0, "never parked", c, flags));
  EXPECT_EQ(s.in_row(), 3);
  EXPECT_EQ(s.disabled(), "3 standbys in a row failed (standby.max_failures 3); last: never parked; off until the flags change");
  EXPECT_EQ(s.disabled_flags(), flags);
  EXPECT_FALSE(s.fail(13, 0, "again", c, flags)) << "disables once";
}

TEST(StandbyStreak, AStandbyThatStayedParkedResetAfterSEndsTheStreak) {
  const Config c = streak_config();
  StandbyStreak s(c.restart);
  (void)s.fail(10, 0, "died", c, {});
  (void)s.fail(20, 0, "died", c, {});
  s.end_of_parked(/*parked_at=*/30, /*now=*/129, c);  // 99 s parked: not yet
  EXPECT_EQ(s.in_row(), 2);
  EXPECT_FALSE(s.fail(200, /*parked_at=*/30, "died while parked", c, {})) << "170 s parked: a new streak";
  EXPECT_EQ(s.in_row(), 1);
  EXPECT_EQ(s.backoff_s(), c.restart.backoff_initial_s);
}

TEST(StandbyStreak, AReleaseOrAnEnableStartsANewStreak) {
  const Config c = streak_config();
  StandbyStreak s(c.restart);
  for (int i = 0; i < 3; ++i) (void)s.fail(i, 0, "died", c, {});
  ASSERT_FALSE(s.disabled().empty());
  s.enable(c.restart);
  EXPECT_TRUE(s.disabled().empty());
  EXPECT_EQ(s.in_row(), 0);
  EXPECT_EQ(s.backoff_s(), 0);
  (void)s.fail(10, 0, "died", c, {});
  s.reset(c.restart);
  EXPECT_EQ(s.in_row(), 0);
  EXPECT_EQ(s.backoff_s(), 0);
}

}  // namespace
}  // namespace fr::supervisor
