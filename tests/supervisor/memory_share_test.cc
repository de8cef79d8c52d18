// The engine's share of each GPU (supervisor/memory_share.h): each GPU's own figures, and the floor.
#include <gtest/gtest.h>

#include <cmath>

#include "supervisor/memory_share.h"

namespace fr::supervisor {
namespace {

constexpr uint64_t kGB = 1000000000;

double rounded(double f) { return std::floor(f * 10000) / 10000; }

// TP=2 with a warmed standby whose processes hold 4 GB on GPU 0 and 6 GB on GPU 1: each GPU loses its own
// figure once, never the 10 GB sum (the standby's ranks are one per GPU, as the engine's).
TEST(MemoryShare, TwoGpusEachLoseOnlyTheirOwnReserve) {
  const GpuShare a = engine_share({"0", 80 * kGB, 20 * kGB, 4 * kGB}, 0.9, /*held_is_used=*/true);
  const GpuShare b = engine_share({"1", 80 * kGB, 20 * kGB, 6 * kGB}, 0.9, /*held_is_used=*/true);
  EXPECT_DOUBLE_EQ(a.share, rounded(0.9 - 20.0 / 80 - 4.0 / 80));
  EXPECT_DOUBLE_EQ(b.share, rounded(0.9 - 20.0 / 80 - 6.0 / 80));
}

TEST(MemoryShare, WhatTheDaemonHoldsCountsOnlyWhenItIsUsedMemory) {
  EXPECT_DOUBLE_EQ(engine_share({"0", 80 * kGB, 20 * kGB, 0}, 0.9, /*held_is_used=*/false).share, 0.9);
  EXPECT_DOUBLE_EQ(engine_share({"0", 80 * kGB, 20 * kGB, 0}, 0.9, /*held_is_used=*/true).share, rounded(0.9 - 0.25));
}

TEST(MemoryShare, AnUnknownSizeLeavesTheUtilization) {
  EXPECT_DOUBLE_EQ(engine_share({"0", 0, 20 * kGB, 4 * kGB}, 0.9, true).share, 0.9);
}

// Daemon pools that pile up (or a reserve larger than the budget) drive the share below zero: refused, with
// every figure of the GPU at fault and none of the one that is fine.
TEST(MemoryShare, AShareBelowTheFloorIsRefusedWithItsFigures) {
  const std::vector<GpuShare> shares = {engine_share({"0", 80 * kGB, 10 * kGB, 0}, 0.9, true),
                                        engine_share({"1", 80 * kGB, 64300000000, 10 * kGB}, 0.9, true)};
  EXPECT_LT(shares[1].share, 0);
  const std::string why = share_refusal(shares, 0.9, 0.05, true);
  EXPECT_EQ(why, "GPU 1: share -0.0288 is below memory.min_share 0.0500 (total 80.0 GB, budget 72.0 GB at "
                 "memory.utilization 0.9000, weight daemon holds 64.3 GB, standby reserve 10.0 GB)");
  EXPECT_EQ(share_refusal({shares[0]}, 0.9, 0.05, true), "");
}

TEST(MemoryShare, AShareAtTheFloorIsAllowed) {
  const GpuShare s = engine_share({"0", 100 * kGB, 85 * kGB, 0}, 0.9, true);
  EXPECT_EQ(share_refusal({s}, 0.9, s.share, true), "");
}

}  // namespace
}  // namespace fr::supervisor
