// The drain's leak check (supervisor/gpu_leftover.h): each GPU against what it should hold without the
// engine, through a probe with set figures.
#include "supervisor/gpu_leftover.h"

#include <gtest/gtest.h>

#include <map>

namespace fr::supervisor {
namespace gpu_leftover_test {

constexpr double kMiB = 1048576.0;

class SetProbe final : public GpuProbe {
 public:
  std::map<std::string, uint64_t> used;  // a GPU not here cannot be read
  Result<GpuMemory> memory(const std::string& gpu) override {
    auto it = used.find(gpu);
    if (it == used.end()) return make_error(Errc::kNotFound, "no GPU " + gpu);
    return GpuMemory{80000 * 1048576ull, it->second, 0, "GPU-" + gpu, "test"};
  }
};

TEST(GpuLeftover, OnlyTheGpusAboveWhatTheyShouldHoldByMoreThanTheTolerance) {
  SetProbe probe;
  probe.used = {{"0", 1000 * 1048576ull}, {"1", 1300 * 1048576ull}, {"2", 1100 * 1048576ull}};
  auto expected = [](const std::string&) { return 1000 * kMiB; };
  const auto left = gpu_leftovers(probe, {"0", "1", "2"}, expected, 200 * kMiB);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].gpu, "1");
  EXPECT_DOUBLE_EQ(left[0].bytes, 300 * kMiB);
}

TEST(GpuLeftover, EachGpuAgainstItsOwnExpectationInOrder) {
  SetProbe probe;
  probe.used = {{"0", 5000 * 1048576ull}, {"1", 5000 * 1048576ull}};
  // GPU 0's daemon holds 4 GB more than GPU 1's: the same use is a leak on GPU 1 only, then both.
  auto expected = [](const std::string& gpu) { return gpu == "0" ? 5000 * kMiB : 1000 * kMiB; };
  auto left = gpu_leftovers(probe, {"0", "1"}, expected, 10 * kMiB);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].gpu, "1");
  left = gpu_leftovers(probe, {"1", "0"}, [](const std::string&) { return 0.0; }, 10 * kMiB);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].gpu, "1");
  EXPECT_EQ(left[1].gpu, "0");
}

TEST(GpuLeftover, AGpuThatCannotBeReadIsNoLeak) {
  SetProbe probe;
  EXPECT_TRUE(gpu_leftovers(probe, {"0"}, [](const std::string&) { return 0.0; }, 0).empty());
  EXPECT_TRUE(gpu_leftovers(probe, {}, [](const std::string&) { return 0.0; }, 0).empty());
}

TEST(GpuLeftover, UsedNowHasEachReadableGpu) {
  SetProbe probe;
  probe.used = {{"0", 7 * 1048576ull}, {"2", 9 * 1048576ull}};
  const auto used = gpus_used_now(probe, {"0", "1", "2"});
  ASSERT_EQ(used.size(), 2u) << "GPU 1 cannot be read: no figure";
  EXPECT_DOUBLE_EQ(used.at("0"), 7 * kMiB);
  EXPECT_DOUBLE_EQ(used.at("2"), 9 * kMiB);
  EXPECT_TRUE(gpus_used_now(probe, {}).empty());
}

}  // namespace gpu_leftover_test
}  // namespace fr::supervisor
