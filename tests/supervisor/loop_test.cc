// The loop's thread-pool work (supervisor/loop.h): a result comes back on the loop thread, and one that
// comes back only once the Loop is being destroyed is dropped (its owner, built on the loop, is gone).
#include "supervisor/loop.h"

#include <gtest/gtest.h>

#include <atomic>

namespace fr::supervisor {
namespace {

TEST(Loop, APoolResultComesBackOnTheLoop) {
  Loop loop;
  std::atomic<bool> worked{false};
  bool done = false;
  run_work(loop, [&] { worked = true; }, [&] {
    done = true;
    loop.stop();
  });
  loop.run();
  EXPECT_TRUE(worked);
  EXPECT_TRUE(done);
}

// fastrestartd's Supervisor destroys its daemon set and its engine before its Loop, whose destructor runs
// the loop a last time to close its handles: a probe or status query still in the pool then completes
// there, and its `done` (holding `this` of a destroyed object) must not run.
TEST(Loop, APoolResultThatOutlivesItsLoopIsDropped) {
  std::atomic<bool> worked{false};
  bool done = false;
  {
    Loop loop;
    run_work(loop, [&] { worked = true; }, [&] { done = true; });
    // The loop is not run: the completion can only come in the destructor's last run.
  }
  EXPECT_TRUE(worked) << "the work itself runs to its end";
  EXPECT_FALSE(done) << "its result came back after the loop ended, and was applied";
}

}  // namespace
}  // namespace fr::supervisor
