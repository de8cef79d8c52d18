// The daemon kinds' factory (daemons/registry.cc) and the sets that have no processes to look at yet: what
// each kind answers the start paths before and without its daemons.
#include <gtest/gtest.h>

#include <string>

#include "supervisor/daemons/daemon_set.h"
#include "fake_host.h"

namespace fr::supervisor {
namespace {

using testing::FakeHost;

std::string refusal_text(const DaemonSet& set) {
  auto r = set.refusal();
  return r ? r->code + ": " + r->detail : "serves";
}

TEST(DaemonSets, TheFactoryPicksTheKindThatWeightsDaemonNames) {
  FakeHost host;
  EXPECT_STREQ(make_daemon_set(host)->kind(), "native") << "the default";
  host.cfg.weights.daemon = DaemonKind::kVllmPreload;
  host.cfg.engine.kind = EngineKind::kVllm;
  EXPECT_STREQ(make_daemon_set(host)->kind(), "vllm-preload");
  host.cfg.weights.daemon = DaemonKind::kNone;
  auto none = make_daemon_set(host);
  EXPECT_STREQ(none->kind(), "none");
  EXPECT_EQ(refusal_text(*none), "no_daemon: weights.daemon is none");
}

TEST(DaemonSets, WeightsModeOffRunsNoDaemonsWhateverTheKind) {
  FakeHost host;
  host.cfg.weights.mode = WeightsMode::kOff;
  for (DaemonKind k : {DaemonKind::kNative, DaemonKind::kNone, DaemonKind::kVllmPreload}) {
    host.cfg.weights.daemon = k;
    auto set = make_daemon_set(host);
    EXPECT_STREQ(set->kind(), "none") << daemon_kind_name(k);
    EXPECT_EQ(refusal_text(*set), "no_daemon: weights.mode is off") << daemon_kind_name(k);
  }
}

TEST(DaemonSets, NoDaemonsAreReadyAndStoppedAtOnceThroughTheLoop) {
  FakeHost host;
  host.cfg.weights.daemon = DaemonKind::kNone;
  auto set = make_daemon_set(host);
  set->start();
  EXPECT_TRUE(host.events.empty()) << "posted, not raised from inside start()";
  host.event_loop.run();
  ASSERT_EQ(host.events.size(), 1u);
  EXPECT_EQ(host.events[0], Event::kDaemonsReady);
  set->stop();
  host.event_loop.run();
  ASSERT_EQ(host.events.size(), 2u);
  EXPECT_EQ(host.events[1], Event::kDaemonsStopped);
  EXPECT_FALSE(set->holds_old_weights());
  EXPECT_FALSE(set->loader_protocol());
  EXPECT_TRUE(set->rows().empty());
  EXPECT_FALSE(set->on_exit(12345, 0));
  set->close();
}

TEST(DaemonSets, VllmPreloadBeforeItsStartIsNotRunningAndTellsTheEngineSo) {
  FakeHost host;
  host.cfg.weights.daemon = DaemonKind::kVllmPreload;
  host.cfg.engine.kind = EngineKind::kVllm;
  host.cfg.weights.fallback = false;
  auto set = make_daemon_set(host);
  EXPECT_EQ(refusal_text(*set), "daemons_not_ready: vllm preload is not running");
  EXPECT_FALSE(set->holds_old_weights());
  EXPECT_TRUE(set->engine_report_decides()) << "vLLM's own words say whether it attached";
  EXPECT_FALSE(set->loader_protocol());
  EXPECT_TRUE(set->attach_sockets().empty());
  auto use = set->preload_use();
  ASSERT_TRUE(use.has_value()) << "the engine's flags are the preload's even while it is not serving";
  EXPECT_FALSE(use->serving);
  EXPECT_FALSE(use->strict);
  EXPECT_FALSE(use->fallback);
  EXPECT_FALSE(set->engine_spawned()) << "not strict: nothing serves";
  EXPECT_TRUE(set->rows().empty());
  set->stop();  // nothing runs: stopped at once
  host.event_loop.run();
  ASSERT_EQ(host.events.size(), 1u);
  EXPECT_EQ(host.events[0], Event::kDaemonsStopped);
  set->close();
}

}  // namespace
}  // namespace fr::supervisor
