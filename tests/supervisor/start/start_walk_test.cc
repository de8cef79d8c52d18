// Where a start's walk of restart.start begins (start/walk.h): an explicit request wins over the order.
#include <gtest/gtest.h>

#include "supervisor/start/walk.h"

namespace fr::supervisor {
namespace {

using P = StartPath;

TEST(StartWalk, WithoutARequestTheWalkBeginsAtTheFirstPath) {
  const WalkBegin b = walk_begin({P::kStandby, P::kSnapshot, P::kWarm, P::kCold}, std::nullopt);
  EXPECT_EQ(b.first, 0u);
  EXPECT_TRUE(b.skipped.empty());
}

// A parked standby listed first does not take the start that `snapshot restore` asked for.
TEST(StartWalk, ARequestedPathSkipsThePathsListedBeforeIt) {
  const WalkBegin b = walk_begin({P::kStandby, P::kWarm, P::kSnapshot, P::kCold}, P::kSnapshot);
  EXPECT_EQ(b.first, 2u);
  EXPECT_EQ(b.skipped, (std::vector<P>{P::kStandby, P::kWarm}));
  const StartRefusal r = requested_refusal(P::kSnapshot);
  EXPECT_EQ(r.code, "requested");
  EXPECT_NE(r.detail.find("snapshot"), std::string::npos) << r.detail;
}

TEST(StartWalk, ARequestForTheFirstOrAnUnlistedPathChangesNothing) {
  WalkBegin b = walk_begin({P::kSnapshot, P::kStandby, P::kWarm}, P::kSnapshot);
  EXPECT_EQ(b.first, 0u);
  EXPECT_TRUE(b.skipped.empty());
  b = walk_begin({P::kStandby, P::kWarm, P::kCold}, P::kSnapshot);
  EXPECT_EQ(b.first, 0u);
  EXPECT_TRUE(b.skipped.empty());
}

}  // namespace
}  // namespace fr::supervisor
