#include "supervisor/policy.h"

#include <gtest/gtest.h>

namespace fr::supervisor {
namespace {

RestartConfig cfg() {
  RestartConfig c;
  c.backoff_initial_s = 1;
  c.backoff_max_s = 8;
  c.backoff_multiplier = 2;
  c.reset_after_s = 100;
  c.crash_loop_limit = 100;
  c.crash_loop_window_s = 1000;
  c.warm_failures_before_cold = 0;
  return c;
}

TEST(Policy, BackoffDoublesToTheCap) {
  RestartPolicy p(cfg());
  std::vector<double> got;
  for (int i = 0; i < 6; ++i) {
    p.on_ready(i * 10.0);
    EXPECT_EQ(p.on_exit(i * 10.0 + 1, true, false), Verdict::kRestart);
    got.push_back(p.backoff_s());
  }
  EXPECT_EQ(got, (std::vector<double>{1, 2, 4, 8, 8, 8}));
}

TEST(Policy, StableRunResetsTheBackoff) {
  RestartPolicy p(cfg());
  p.on_exit(1, true, false);
  p.on_exit(2, true, false);
  EXPECT_EQ(p.backoff_s(), 2);
  p.on_ready(3);
  p.on_exit(3 + 100, true, false);  // ran for reset_after_s
  EXPECT_EQ(p.backoff_s(), 1);
}

TEST(Policy, RequestedRestartsAreImmediate) {
  RestartPolicy p(cfg());
  p.on_exit(1, true, false);
  EXPECT_EQ(p.on_exit(2, false, false), Verdict::kRestart);
  EXPECT_EQ(p.backoff_s(), 0);
}

TEST(Policy, CrashLoopGivesUpWithinTheWindowOnly) {
  auto c = cfg();
  c.crash_loop_limit = 3;
  c.crash_loop_window_s = 60;
  RestartPolicy p(c);
  EXPECT_EQ(p.on_exit(0, true, false), Verdict::kRestart);
  EXPECT_EQ(p.on_exit(10, true, false), Verdict::kRestart);
  EXPECT_EQ(p.on_exit(100, true, false), Verdict::kRestart);  // the first two fell out of the window
  EXPECT_EQ(p.on_exit(110, true, false), Verdict::kRestart);
  EXPECT_EQ(p.on_exit(120, true, false), Verdict::kGiveUp);
  EXPECT_EQ(p.give_up_reason("crash", "exit code 1"), "3 failures within 60 s; last: crash (exit code 1)");
}

TEST(Policy, FailingWarmStartsEscalateToCold) {
  auto c = cfg();
  c.warm_failures_before_cold = 2;
  RestartPolicy p(c);
  EXPECT_EQ(p.on_exit(1, true, true), Verdict::kRestart);
  EXPECT_EQ(p.on_exit(2, true, true), Verdict::kColdRestart);
  EXPECT_EQ(p.on_exit(3, true, true), Verdict::kRestart);  // the count starts over after escalating
  // A warm start that became ready and then crashed is not the cache's fault.
  p.on_ready(4);
  EXPECT_EQ(p.on_exit(5, true, true), Verdict::kRestart);
  p.on_ready(6);
  EXPECT_EQ(p.on_exit(7, true, true), Verdict::kRestart);
}

}  // namespace
}  // namespace fr::supervisor
