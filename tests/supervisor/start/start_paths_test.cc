// The start paths (start/start_path.h) through a fake StartHost: the paths served by a part (standby,
// snapshot) ask only StartHost::part for it, and warm and cold only what every path needs.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "supervisor/start/start_path.h"

namespace fr::supervisor {
namespace {

using SP = StartPath;

class FakeStartPart final : public StartPart {
 public:
  std::optional<StartRefusal> refusal() const override { return refuse; }
  Status start() override {
    starts++;
    if (fail) return make_error(Errc::kIo, "the gate did not take the release");
    return {};
  }
  std::optional<StartRefusal> refuse;
  bool fail = false;
  int starts = 0;
};

class FakeStartHost final : public StartHost {
 public:
  std::optional<StartRefusal> daemons_refusal() const override { return daemons; }
  bool daemons_hold_old_weights() const override { return old_weights; }
  void reload_daemons_for_start() override { calls.push_back("reload_daemons"); }
  Status spawn_engine(StartPath expected) override {
    calls.push_back(std::string("spawn ") + start_path_name(expected));
    return {};
  }
  StartPart* part(StartPath path) const override {
    auto it = parts.find(path);
    return it == parts.end() ? nullptr : it->second;
  }
  std::optional<StartRefusal> daemons;
  bool old_weights = false;
  std::map<StartPath, StartPart*> parts;
  std::vector<std::string> calls;
};

TEST(StartPaths, ThePathsOfAPartAnswerWithItsRefusalAndStartIt) {
  for (SP id : {SP::kStandby, SP::kSnapshot}) {
    FakeStartPart part;
    FakeStartHost host;
    host.parts[id] = &part;
    const StartPathImpl& path = start_path(id);
    EXPECT_EQ(path.id(), id);
    part.refuse = StartRefusal{"not_parked", "has not parked yet"};
    auto r = path.refusal(host);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->code, "not_parked");
    EXPECT_EQ(r->detail, "has not parked yet");
    part.refuse.reset();
    EXPECT_FALSE(path.refusal(host));
    auto started = path.start(host);
    ASSERT_TRUE(started.ok());
    EXPECT_EQ(*started, StartOutcome::kStarted);
    EXPECT_EQ(part.starts, 1);
    EXPECT_TRUE(host.calls.empty()) << "a part's path spawns no engine itself";
  }
}

TEST(StartPaths, APartThatFailsAtOnceFailsItsPath) {
  FakeStartPart part;
  part.fail = true;
  FakeStartHost host;
  host.parts[SP::kStandby] = &part;
  auto started = start_path(SP::kStandby).start(host);
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.error().message, "the gate did not take the release");
}

// A host without the part (none registered for the path) refuses it rather than crash.
TEST(StartPaths, AHostWithoutThePartRefusesItsPath) {
  FakeStartHost host;
  auto r = start_path(SP::kSnapshot).refusal(host);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->code, "unavailable");
  EXPECT_FALSE(start_path(SP::kStandby).start(host).ok());
}

TEST(StartPaths, WarmAndColdSpawnTheEngineThroughTheHost) {
  FakeStartHost host;
  host.daemons = StartRefusal{"daemons_not_ready", "loading"};
  EXPECT_EQ(start_path(SP::kWarm).refusal(host)->code, "daemons_not_ready");
  EXPECT_FALSE(start_path(SP::kCold).refusal(host));
  ASSERT_TRUE(start_path(SP::kWarm).start(host).ok());
  host.old_weights = true;
  auto cold = start_path(SP::kCold).start(host);
  ASSERT_TRUE(cold.ok());
  EXPECT_EQ(*cold, StartOutcome::kWaiting);
  EXPECT_EQ(host.calls, (std::vector<std::string>{"spawn warm", "reload_daemons"}));
}

}  // namespace
}  // namespace fr::supervisor
