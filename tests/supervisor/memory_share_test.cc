// The engine's share of each GPU (supervisor/memory_share.h): each GPU's own figures, and the floor.
#include <gtest/gtest.h>

#include <cmath>

#include "supervisor/memory_share.h"

namespace fr::supervisor {
namespace {

constexpr uint64_t kGB = 1000000000;

double rounded(double f) { return std::floor(f * 10000) / 10000; }

__extension__ typedef unsigned __int128 u128;  // the reference product, wider than any byte count

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

// docs/supervisor.md, "KV arenas", the worked example: an 80 GB GPU at memory.utilization 0.9, a daemon
// whose GPU memory is 16 GB of weights and a 40 GB KV arena. Only the weights are held outside the engine;
// the arena is its KV cache, inside its share. The engine is told 0.7 (56 GB), 16 GB of it beyond the arena.
TEST(MemoryShare, AnArenaIsInsideTheEnginesShareNotHeldOutsideIt) {
  const uint64_t daemon = 56 * kGB, arena = 40 * kGB;
  EXPECT_EQ(held_outside(daemon, arena), 16 * kGB);
  const GpuShare s = engine_share({"0", 80 * kGB, held_outside(daemon, arena), 0, arena}, 0.9, /*held_is_used=*/true);
  EXPECT_DOUBLE_EQ(s.share, 0.7);
  EXPECT_EQ(s.share_bytes, 56 * kGB);
  EXPECT_EQ(s.own_bytes, 16 * kGB);
  // The same share as an engine that allocates its KV cache itself: the arena changes none of it.
  EXPECT_DOUBLE_EQ(engine_share({"0", 80 * kGB, 16 * kGB, 0, 0}, 0.9, true).share, s.share);
  // Counted as held outside, it would have left the engine 0.2 (16 GB) for weights' neighbours and KV alike.
  EXPECT_DOUBLE_EQ(engine_share({"0", 80 * kGB, daemon, 0, 0}, 0.9, true).share, 0.2);
  // Not zero_copy: the weights are not subtracted, and still the arena is not either.
  EXPECT_DOUBLE_EQ(engine_share({"0", 80 * kGB, 16 * kGB, 0, arena}, 0.9, false).share, 0.9);
}

// Every byte figure is an integer computed from the share the engine is told: exact, whatever the size.
TEST(MemoryShare, ByteFiguresAreExact) {
  // An H200's total (143771 MiB), a 4.5 GiB weight pool, a 100 GiB arena and a 1.5 GiB standby reserve.
  const uint64_t total = 150754820096, held = 4831838208, arena = 107374182400, reserve = 1610612736;
  const GpuShare s = engine_share({"0", total, held, reserve, arena}, 0.9, true);
  const double units = std::floor((0.9 - double(reserve) / double(total) - double(held) / double(total)) * 10000);
  EXPECT_DOUBLE_EQ(s.share, units / 10000);
  // floor(total x units / 10^4) by hand, in 128 bits.
  const auto expect = static_cast<uint64_t>(static_cast<u128>(total) * static_cast<uint64_t>(units) / 10000);
  EXPECT_EQ(s.share_bytes, expect);
  EXPECT_EQ(s.own_bytes, expect - arena);
  // Totals where a double product would round: 2^53 + 1 bytes and share 1.0.
  const uint64_t odd = (uint64_t{1} << 53) + 1;
  EXPECT_EQ(engine_share({"0", odd, 0, 0, 0}, 1.0, true).share_bytes, odd);
  EXPECT_EQ(engine_share({"0", 10007, 0, 0, 0}, 0.9999, true).share_bytes, uint64_t{10005});  // floor(10007 x 0.9999)
}

TEST(MemoryShare, AnArenaLargerThanTheShareLeavesNothingOwnAndIsNamedInARefusal) {
  const GpuShare s = engine_share({"0", 80 * kGB, 70 * kGB, 0, 20 * kGB}, 0.9, true);
  EXPECT_DOUBLE_EQ(s.share, 0.025);
  EXPECT_EQ(s.share_bytes, 2 * kGB);
  EXPECT_EQ(s.own_bytes, 0u);
  EXPECT_EQ(share_refusal({s}, 0.9, 0.05, true),
            "GPU 0: share 0.0250 is below memory.min_share 0.0500 (total 80.0 GB, budget 72.0 GB at memory.utilization "
            "0.9000, weight daemon holds 70.0 GB, standby reserve 0.0 GB, KV arena 20.0 GB (inside the share))");
  const GpuShare negative = engine_share({"0", 80 * kGB, 75 * kGB, 0, 20 * kGB}, 0.9, true);
  EXPECT_LT(negative.share, 0);
  EXPECT_EQ(negative.share_bytes, 0u);
  EXPECT_EQ(negative.own_bytes, 0u);
}

TEST(MemoryShare, HeldOutsideNeverUnderflows) {
  EXPECT_EQ(held_outside(10, 10), 0u);
  EXPECT_EQ(held_outside(10, 11), 0u);
  EXPECT_EQ(held_outside(UINT64_MAX, 1), UINT64_MAX - 1);
}

}  // namespace
}  // namespace fr::supervisor
