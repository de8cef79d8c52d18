// Tensor parallel (docs/tinyengine.md, "Tensor parallel"): the shards' partial outputs add up to the whole
// block, the same N answers alike on every run, and the real engine's ranks live and die as one.
#include "tinyengine/tp.h"

#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "tinyengine/checkpoint.h"
#include "engine_process.h"
#include "tinyengine/model.h"

namespace fr::te {
namespace {

using nlohmann::json;

struct Full {
  CheckpointInfo info;
  DiskLoad disk;
};

Full load_full(const std::string& dir) {
  auto info = inspect_checkpoint(dir);
  EXPECT_TRUE(info.ok());
  auto disk = load_from_disk(*info);
  EXPECT_TRUE(disk.ok());
  return {*info, std::move(*disk)};
}

// Every rank's shard of the tiny checkpoint, and a Model bound to it (rank 0's reduce sums the others').
struct Ranks {
  std::vector<TensorSet> shards;
  std::vector<Model> models;
};

Ranks shard_all(const Full& f, int n) {
  Ranks r;
  for (int rank = 0; rank < n; ++rank) {
    auto s = shard_tensors(f.info.config, f.disk.set, {n, rank});
    EXPECT_TRUE(s.ok()) << s.error().message;
    r.shards.push_back(std::move(*s));
  }
  for (int rank = 0; rank < n; ++rank) {
    TpReduce reduce;
    if (rank == 0)
      reduce = [&r, n](int block, const float* a, float* out, int d) -> Status {
        std::vector<float> part(static_cast<size_t>(d));
        for (int other = 1; other < n; ++other) {
          r.models.at(static_cast<size_t>(other)).extra_partial(block, a, part.data());
          for (int i = 0; i < d; ++i) out[i] += part[static_cast<size_t>(i)];
        }
        return {};
      };
    auto m = Model::bind(f.info.config, r.shards[static_cast<size_t>(rank)].lookup(), {n, rank}, reduce);
    EXPECT_TRUE(m.ok()) << m.error().message;
    r.models.push_back(std::move(*m));
  }
  return r;
}

TEST(TpModel, TheShardsPartialOutputsAddUpToTheWholeBlock) {
  const Full f = load_full(test::tiny_checkpoint());
  auto whole = Model::bind(f.info.config, f.disk.set.lookup());
  ASSERT_TRUE(whole.ok());
  const int d = f.info.config.d_model;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(static_cast<size_t>(d));
  for (auto& v : a) v = u(rng);
  std::vector<float> expect(static_cast<size_t>(d));
  whole->extra_partial(0, a.data(), expect.data());
  for (int n : {2, 3, 4}) {
    Ranks r = shard_all(f, n);
    std::vector<float> sum(static_cast<size_t>(d), 0.0f), part(static_cast<size_t>(d));
    uint64_t bytes = 0;
    for (int rank = 0; rank < n; ++rank) {
      r.models[static_cast<size_t>(rank)].extra_partial(0, a.data(), part.data());
      for (int i = 0; i < d; ++i) sum[static_cast<size_t>(i)] += part[static_cast<size_t>(i)];
      bytes += rank_weight_bytes(f.info.config, {n, rank});
    }
    for (int i = 0; i < d; ++i) EXPECT_NEAR(sum[static_cast<size_t>(i)], expect[static_cast<size_t>(i)], 1e-4) << "n " << n << " i " << i;
    EXPECT_EQ(bytes, total_weight_bytes(f.info.config)) << "the shards cover every weight once";
  }
}

TEST(TpModel, TheSameSizeAnswersBitwiseAlikeAndAsTheWholeModel) {
  const Full f = load_full(test::tiny_checkpoint());
  auto whole = Model::bind(f.info.config, f.disk.set.lookup());
  ASSERT_TRUE(whole.ok());
  const auto prompt = tokenize("The capital of France is");
  const Generation one = whole->generate(prompt, 8, 0);
  Ranks a = shard_all(f, 2), b = shard_all(f, 2);
  const Generation x = a.models[0].generate(prompt, 8, 0), y = b.models[0].generate(prompt, 8, 0);
  ASSERT_TRUE(x.error.empty()) << x.error;
  ASSERT_EQ(x.steps.size(), y.steps.size());
  for (size_t i = 0; i < x.steps.size(); ++i) {
    EXPECT_EQ(x.steps[i].token, y.steps[i].token);
    EXPECT_EQ(std::memcmp(&x.steps[i].logprob, &y.steps[i].logprob, sizeof(float)), 0) << "step " << i;
    // Other sums in another order: the same tokens, log-probabilities within float rounding.
    EXPECT_EQ(x.steps[i].token, one.steps.at(i).token);
    EXPECT_NEAR(x.steps[i].logprob, one.steps.at(i).logprob, 1e-3);
  }
}

TEST(TpModel, AFailedReduceFailsTheGenerationWithItsReason) {
  const Full f = load_full(test::tiny_checkpoint());
  auto s0 = shard_tensors(f.info.config, f.disk.set, {2, 0});
  ASSERT_TRUE(s0.ok());
  auto m = Model::bind(f.info.config, s0->lookup(), {2, 0},
                       [](int, const float*, float*, int) -> Status { return make_error(Errc::kIo, "rank 1 did not answer"); });
  ASSERT_TRUE(m.ok());
  const Generation g = m->generate(tokenize("hi"), 4, 0);
  EXPECT_EQ(g.error, "rank 1 did not answer");
  EXPECT_TRUE(g.steps.empty());
}

TEST(TpModel, SizesThatCannotSplitTheCheckpointAreRefused) {
  ModelConfig c;
  EXPECT_FALSE(check_tp(c, {9, 0}).ok());
  EXPECT_FALSE(check_tp(c, {2, 2}).ok());
  c.extra_blocks = 0;
  auto s = check_tp(c, {2, 0});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("no extra blocks"), std::string::npos) << s.error().message;
  c.extra_blocks = 1;
  c.extra_width = 3;
  s = check_tp(c, {4, 0});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("width 3"), std::string::npos) << s.error().message;
  EXPECT_TRUE(check_tp(c, {3, 2}).ok());
}

TEST(TpDevices, EachRankTakesItsEntryOfTheDevicesTheSupervisorExports) {
  ::setenv("FASTRESTART_DEVICES", "host:a,host:b", 1);
  ::setenv("FASTRESTART_GPU_MEMORY_UTILIZATION", "0.8,0.7125", 1);
  EXPECT_EQ(*rank_device(0, 2, "host"), "host:a");
  EXPECT_EQ(*rank_device(1, 2, "host"), "host:b");
  auto three = rank_device(0, 3, "host");
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.error().message.find("lists 2"), std::string::npos) << three.error().message;
  EXPECT_DOUBLE_EQ(rank_memory_utilization(1, 0.9), 0.7125);
  EXPECT_DOUBLE_EQ(rank_memory_utilization(2, 0.9), 0.9);
  ::setenv("FASTRESTART_DEVICES", "cuda:0,cuda:1", 1);  // GPUs: the CPU forward keeps its own device
  EXPECT_EQ(*rank_device(1, 2, "host"), "host");
  ::unsetenv("FASTRESTART_DEVICES");
  ::unsetenv("FASTRESTART_GPU_MEMORY_UTILIZATION");
  EXPECT_EQ(*rank_device(1, 2, "host"), "host");
}

// The real engine's ranks: rank 1 is a child of rank 0 in its process group; a kill -9 of rank 1 makes
// rank 0 exit 1 at once, naming the rank.
TEST(TinyEngineTp, AKilledRankEndsRankZeroNamingIt) {
  test::Engine e(test::tiny_checkpoint(), {"--tensor-parallel-size", "2"});
  ASSERT_TRUE(e.wait_ready()) << e.log();
  auto [code, stats] = e.get("/stats");
  ASSERT_EQ(code, 200);
  const json ranks = stats["tensor_parallel"]["ranks"];
  ASSERT_EQ(ranks.size(), 2u) << stats.dump();
  const pid_t rank1 = ranks[1]["pid"];
  EXPECT_EQ(::getpgid(rank1), ::getpgid(e.pid()));
  EXPECT_EQ(ranks[1]["path"], "disk");
  ASSERT_EQ(::kill(rank1, SIGKILL), 0);
  EXPECT_EQ(e.wait_exit(10), 1) << e.log();
  EXPECT_NE(e.log().find("tensor-parallel rank 1 (pid " + std::to_string(rank1) + ") was killed"), std::string::npos) << e.log();
}

// Rank 0's death (kill -9 of it alone) takes the other ranks with it.
TEST(TinyEngineTp, RankZerosDeathKillsTheOtherRanks) {
  test::Engine e(test::tiny_checkpoint(), {"--tensor-parallel-size", "3"});
  ASSERT_TRUE(e.wait_ready()) << e.log();
  const json ranks = e.get("/stats").second["tensor_parallel"]["ranks"];
  ASSERT_EQ(ranks.size(), 3u);
  e.signal(SIGKILL);
  for (int rank = 1; rank < 3; ++rank) {
    const pid_t pid = ranks[static_cast<size_t>(rank)]["pid"];
    bool gone = false;
    for (int i = 0; i < 400 && !gone; ++i) {
      gone = ::kill(pid, 0) != 0;
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    EXPECT_TRUE(gone) << "rank " << rank << " outlived rank 0";
  }
}

TEST(TinyEngineTp, TensorParallelNeedsTheCpuForward) {
  test::Engine e(test::tiny_checkpoint(), {"--tensor-parallel-size", "2", "--device", "cuda:0"});
  EXPECT_EQ(e.wait_exit(10), 2);
  EXPECT_NE(e.log().find("runs on the CPU forward only"), std::string::npos) << e.log();
}

}  // namespace
}  // namespace fr::te
