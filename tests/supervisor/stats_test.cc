// What fastrestartd counts (supervisor/stats.h) as status and /metrics read it: cumulative histogram buckets,
// counters by their documented names, the recent rollbacks capped with the newest kept, start-path outcomes.
#include "supervisor/stats.h"

#include <gtest/gtest.h>

namespace fr::supervisor {
namespace {

using nlohmann::json;

TEST(Histogram, BucketsAreCumulativeAndAboveTheLastBoundOnlyInCountAndSum) {
  Histogram h;
  h.add(0.1);   // on a bound: le 0.1
  h.add(0.3);   // le 0.5
  h.add(7);     // le 10
  h.add(5000);  // above 1800: +Inf only
  const auto s = h.to_status();
  ASSERT_EQ(s.buckets.size(), std::size(Histogram::kBounds));
  EXPECT_EQ(s.buckets.front(), (std::pair<double, uint64_t>{0.1, 1}));
  EXPECT_EQ(s.buckets[1], (std::pair<double, uint64_t>{0.25, 1}));
  EXPECT_EQ(s.buckets[2], (std::pair<double, uint64_t>{0.5, 2}));
  EXPECT_EQ(s.buckets[6], (std::pair<double, uint64_t>{10, 3}));
  EXPECT_EQ(s.buckets.back(), (std::pair<double, uint64_t>{1800, 3}));
  EXPECT_EQ(s.count, 4u);
  EXPECT_NEAR(s.sum, 5007.4, 1e-9);
  // The JSON form (a snapshot's break-even reads it) says the same.
  const json j = h.to_json();
  EXPECT_EQ(j["count"], 4);
  EXPECT_EQ(j["buckets"][2], json::array({0.5, 2}));
  EXPECT_EQ(j["buckets"].size(), std::size(Histogram::kBounds));
}

TEST(Stats, NothingRecordedFillsNothing) {
  status::SupervisorStatus st;
  Stats{}.fill(st);
  EXPECT_TRUE(st.restarts.empty());
  EXPECT_EQ(st.rollbacks.count, 0u);
  EXPECT_TRUE(st.metrics.time_to_ready.empty());
  EXPECT_TRUE(st.metrics.start_paths.empty());
  EXPECT_FALSE(st.metrics.snapshots.has_value());  // the snapshot side's, not the statistics'
}

TEST(Stats, CountersLandInTheirStatusFields) {
  Stats s;
  s.ready("warm", 2);
  s.ready("warm", 3);
  s.ready("cold", 40);
  s.attach("hit");
  s.attach("hit");
  s.attach("fallback");
  s.attach("none");
  s.attach_miss("no_daemon");
  s.attach_miss("no_daemon");
  s.reload("warm");
  s.reload("cold");
  s.reload("rolled_back");
  s.reload("rolled_back");
  s.restart("crash");
  s.restart("oom");
  s.restart("crash");
  status::SupervisorStatus st;
  s.fill(st);
  const auto& m = st.metrics;
  ASSERT_EQ(m.time_to_ready.size(), 2u);
  EXPECT_EQ(m.time_to_ready.at("warm").count, 2u);
  EXPECT_DOUBLE_EQ(m.time_to_ready.at("warm").sum, 5);
  EXPECT_EQ(m.time_to_ready.at("cold").count, 1u);
  EXPECT_EQ(m.attaches_hit, 2u);
  EXPECT_EQ(m.attaches_fallback, 1u);
  EXPECT_EQ(m.attaches_none, 1u);
  EXPECT_EQ(m.attach_misses, (std::map<std::string, uint64_t>{{"no_daemon", 2}}));
  EXPECT_EQ(m.reloads_warm, 1u);
  EXPECT_EQ(m.reloads_cold, 1u);
  EXPECT_EQ(m.reloads_rolled_back, 2u);
  EXPECT_EQ(st.restarts, (std::map<std::string, uint64_t>{{"crash", 2}, {"oom", 1}}));
  EXPECT_EQ(s.time_to_ready().at("warm").count(), 2u);
}

TEST(Stats, RollbacksAreCountedByCauseAndTheNewestKeptWithWhy) {
  Stats s;
  for (size_t i = 0; i < Stats::kRecentRollbacks + 3; ++i)
    s.rollback(i % 2 ? "crash" : "unpersisted", "push " + std::to_string(i), {"--threads", std::to_string(i)},
               static_cast<int64_t>(1000 + i));
  status::SupervisorStatus st;
  s.fill(st);
  EXPECT_EQ(st.rollbacks.count, Stats::kRecentRollbacks + 3);
  EXPECT_EQ(st.rollbacks.by_cause, (std::map<std::string, uint64_t>{{"crash", 6}, {"unpersisted", 7}}));
  EXPECT_EQ(st.metrics.rollbacks, st.rollbacks.by_cause);  // /metrics reads the same counts
  ASSERT_EQ(st.rollbacks.recent.size(), Stats::kRecentRollbacks);
  // The oldest three are gone: the first kept is push 3, the last push 12.
  EXPECT_EQ(st.rollbacks.recent.front()["detail"], "push 3");
  EXPECT_EQ(st.rollbacks.recent.front()["unix_time"], 1003);
  EXPECT_EQ(st.rollbacks.recent.front()["cause"], "crash");
  EXPECT_EQ(st.rollbacks.recent.back()["detail"], "push 12");
  EXPECT_EQ(st.rollbacks.recent.back()["rejected_flags"], json::array({"--threads", "12"}));
}

TEST(Stats, StartPathOutcomesAreCountedPerPathOutcomeAndReason) {
  Stats s;
  s.start_attempt("standby", "skipped", "no_standby");
  s.start_attempt("standby", "skipped", "no_standby");
  s.start_attempt("warm", "started", "");
  s.start_attempt("snapshot", "failed", "restore_failed");
  status::SupervisorStatus st;
  s.fill(st);
  ASSERT_EQ(st.metrics.start_paths.size(), 3u);
  // In the order of their keys ("path/outcome/reason"), as /metrics lists them.
  const auto& p = st.metrics.start_paths;
  EXPECT_EQ(p[0].path, "snapshot");
  EXPECT_EQ(p[0].outcome, "failed");
  EXPECT_EQ(p[0].reason, "restore_failed");
  EXPECT_EQ(p[0].count, 1u);
  EXPECT_EQ(p[1].path, "standby");
  EXPECT_EQ(p[1].reason, "no_standby");
  EXPECT_EQ(p[1].count, 2u);
  EXPECT_EQ(p[2].path, "warm");
  EXPECT_EQ(p[2].outcome, "started");
  EXPECT_EQ(p[2].reason, "");
}

}  // namespace
}  // namespace fr::supervisor
