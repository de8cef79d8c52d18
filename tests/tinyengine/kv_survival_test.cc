// The prefix cache's index surviving kill -9 (docs/kv-survival.md), end to end: a real fastrestart-weightd
// (host backend) lends the KV arena; real tiny engines serve from it and are killed with SIGKILL at random
// instants while requests prefill and decode; the next engine on the same arena recovers the index, and its
// answers to 50 prompts are those of a fresh engine without any cache. Another model on the same arena
// drops the whole index.
//
// FR_KV_SURVIVAL_KILLS sets the number of kills (20 by default; 200 for a soak).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>

#include "engine_process.h"
#include "support/harness.h"
#include "tinyengine/checkpoint.h"

namespace fr::te::test {
namespace {

using nlohmann::json;

constexpr const char* kKvArenaBytes = "4194304";

std::string kv_socket_dir(const fr::test::TempDir& d) {
  const std::string p = d / "run";
  ::mkdir(p.c_str(), 0700);
  return p;
}

// 50 prompts over 10 shared prefixes of different lengths (several blocks of 4 tokens each).
std::vector<std::string> survival_prompts() {
  std::vector<std::string> v;
  for (int s = 0; s < 10; ++s) {
    std::string prefix = "System " + std::to_string(s) + ": ";
    for (int k = 0; k <= s; ++k) prefix += "answer in few words, ";
    for (int q = 0; q < 5; ++q) v.push_back(prefix + "question " + std::to_string(q) + "?");
  }
  return v;
}

std::vector<std::string> arena_args(const std::string& sockets, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"--fastrestart-socket-dir", sockets, "--kv-arena-bytes", kKvArenaBytes,
                                "--kv-arena-wait", "10", "--block-size", "4", "--threads", "4"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::vector<Answer> answers(const Engine& e, const std::vector<std::string>& prompts) {
  std::vector<Answer> v;
  for (const auto& p : prompts) {
    auto [st, c] = e.post("/v1/completions", completion_request(p, 6));
    EXPECT_EQ(st, 200) << c.dump();
    v.push_back(st == 200 ? answer_of(c) : Answer{});
  }
  return v;
}

int kills_wanted() {
  const char* v = std::getenv("FR_KV_SURVIVAL_KILLS");
  return v ? std::max(1, std::atoi(v)) : 20;
}

TEST(TinyEngineKvSurvival, TheIndexSurvivesKillNineAtAnyInstantAndNeverServesAWrongToken) {
  if (access(fr::test::weightd().c_str(), X_OK) != 0) GTEST_SKIP() << "fastrestart-weightd is not built";
  fr::test::TempDir tmp;
  const std::string sockets = kv_socket_dir(tmp);
  fr::test::Daemon d(sockets);
  const std::string& model = tiny_checkpoint();
  const auto prompts = survival_prompts();

  std::vector<Answer> want;
  {
    Engine fresh(model, {"--no-enable-prefix-caching"});
    ASSERT_TRUE(fresh.wait_ready(30)) << fresh.log();
    EXPECT_EQ(fresh.get("/stats").second["kv_cache"]["enabled"], false);
    want = answers(fresh, prompts);
  }

  std::mt19937 rng(20261203);
  const int kills = kills_wanted();
  uint64_t max_dropped = 0;
  json dropped_at_max;
  for (int i = 0; i < kills; ++i) {
    Engine e(model, arena_args(sockets));
    ASSERT_TRUE(e.wait_ready(30)) << e.log() << d.log();
    const json kv = e.get("/stats").second["kv_cache"];
    ASSERT_EQ(kv["location"], "arena") << kv.dump() << e.log();
    if (i > 0) {
      EXPECT_EQ(kv["recovery"]["header"], "valid") << kv.dump();
    }
    // Whatever a kill interrupted was never published: no recovery may find a torn entry or a block that
    // fails its checksum or hash.
    for (const char* why : {"torn", "checksum", "hash"})
      EXPECT_FALSE(kv["recovery"]["dropped"].contains(why)) << "after kill " << i << ": " << kv.dump();
    if (kv["recovery"]["dropped_total"].get<uint64_t>() > max_dropped) {
      max_dropped = kv["recovery"]["dropped_total"].get<uint64_t>();
      dropped_at_max = kv["recovery"]["dropped"];
    }
    // Two clients prefill and decode without pause; the kill lands wherever they are.
    std::atomic<bool> stop{false};
    std::vector<std::thread> clients;
    for (int c = 0; c < 2; ++c)
      clients.emplace_back([&, seed = rng()] {
        std::mt19937 r(seed);
        while (!stop) {
          const auto& p = prompts[r() % prompts.size()];
          e.post("/v1/completions", completion_request(p + std::string(r() % 9, '.'), 1 + static_cast<int>(r() % 24)), 2);
        }
      });
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 40000));
    e.signal(SIGKILL);
    EXPECT_EQ(e.wait_exit(10), 128 + SIGKILL);
    stop = true;
    for (auto& t : clients) t.join();
  }

  Engine after(model, arena_args(sockets));
  ASSERT_TRUE(after.wait_ready(30)) << after.log();
  const json rec = after.get("/stats").second["kv_cache"]["recovery"];
  EXPECT_EQ(rec["header"], "valid") << rec.dump();
  EXPECT_GT(rec["recovered"].get<uint64_t>(), 0u) << rec.dump();
  EXPECT_NE(after.log().find("kv cache: location=arena"), std::string::npos) << after.log();
  EXPECT_NE(after.log().find("kv_recovered="), std::string::npos) << after.log();
  const auto got = answers(after, prompts);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], want[i]) << prompts[i];
  const json prefix = after.get("/stats").second["kv_cache"]["prefix"];
  EXPECT_GT(prefix["hit_tokens"].get<uint64_t>(), 0u) << prefix.dump();
  std::printf("kills=%d recovered=%llu max_dropped=%llu (%s) hit_rate=%.3f\n", kills,
              static_cast<unsigned long long>(rec["recovered"].get<uint64_t>()),
              static_cast<unsigned long long>(max_dropped), dropped_at_max.dump().c_str(), prefix["hit_rate"].get<double>());

}

TEST(TinyEngineKvSurvival, AnotherModelOnTheSameArenaDropsTheWholeIndex) {
  if (access(fr::test::weightd().c_str(), X_OK) != 0) GTEST_SKIP() << "fastrestart-weightd is not built";
  fr::test::TempDir tmp;
  const std::string sockets = kv_socket_dir(tmp);
  fr::test::Daemon d(sockets);
  const auto prompts = survival_prompts();
  uint64_t indexed = 0;
  {
    Engine e(tiny_checkpoint(), arena_args(sockets));
    ASSERT_TRUE(e.wait_ready(30)) << e.log();
    answers(e, {prompts[0], prompts[49]});
    indexed = e.get("/stats").second["kv_cache"]["blocks_indexed"].get<uint64_t>();
    ASSERT_GT(indexed, 0u);
    e.signal(SIGKILL);
    EXPECT_EQ(e.wait_exit(10), 128 + SIGKILL);
  }
  GenOptions o;
  o.seed = 8;  // the same config, other weights
  const std::string other = tmp / "other";
  ASSERT_TRUE(generate_checkpoint(o, other).ok());
  std::vector<Answer> want;
  {
    Engine fresh(other, {"--no-enable-prefix-caching"});
    ASSERT_TRUE(fresh.wait_ready(30)) << fresh.log();
    want = answers(fresh, {prompts[0], prompts[49]});
  }
  Engine e(other, arena_args(sockets));
  ASSERT_TRUE(e.wait_ready(30)) << e.log();
  const json rec = e.get("/stats").second["kv_cache"]["recovery"];
  EXPECT_EQ(rec["header"], "identity") << rec.dump();
  EXPECT_EQ(rec["recovered"], 0);
  EXPECT_EQ(rec["dropped"]["identity"], indexed) << rec.dump();
  EXPECT_NE(e.log().find("header=identity"), std::string::npos) << e.log();
  EXPECT_EQ(answers(e, {prompts[0], prompts[49]}), want);
}

}  // namespace
}  // namespace fr::te::test
