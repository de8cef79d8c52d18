// The path a ready start took (supervisor/attach_path.h): restored and released engines at once, the
// engine's own word, and the daemons' records read off the loop, whose answer is dropped when its engine
// is gone by then. The daemons are absent here (a socket nobody serves): their records say nothing.
#include "supervisor/attach_path.h"

#include <gtest/gtest.h>

#include <optional>

#include "supervisor/loop.h"
#include "support/harness.h"

namespace fr::supervisor {
namespace attach_path_test {

struct Decided {
  Loop loop;
  Stats stats;
  Engine engine;
  std::optional<std::string> path;
  Engine* now = &engine;  // what `current` gives
  bool asked = false;     // the daemons answered and `current` was asked

  // decide_ready_path, then the loop until the daemons answered (or 30 s passed).
  void decide(const ReadyPathFacts& facts) {
    decide_ready_path(
        loop, engine, facts, stats,
        [this] {
          asked = true;
          loop.stop();  // the loop returns after this callback, which calls `done` or drops the answer
          return now;
        },
        [this](std::string p) { path = std::move(p); });
    if (path) return;
    Timer limit(loop);
    limit.start(30, [this] { loop.stop(); });
    loop.run();
    EXPECT_TRUE(asked) << "the daemons' query never came back";
  }
};

TEST(ReadyPath, ARestoredOrReleasedEngineIsItsPathAtOnce) {
  Decided d;
  d.engine.snapshot_id = "20261206-000000";
  d.engine.standby_level = "warmed";
  d.decide({.loader_protocol = true});
  EXPECT_EQ(d.path, "snapshot");
  Decided s;
  s.engine.standby_level = "warmed";
  s.decide({.loader_protocol = true});
  EXPECT_EQ(s.path, "standby");
}

TEST(ReadyPath, WithoutTheLoaderProtocolOrAWordTheStartWasCold) {
  Decided d;
  d.decide({});
  EXPECT_EQ(d.path, "cold");
  Decided r;  // the engine's word decides, and it said nothing
  r.decide({.engine_report_decides = true});
  EXPECT_EQ(r.path, "cold");
}

TEST(ReadyPath, DaemonsWithNoRecordOfTheEngineMakeItCold) {
  test::TempDir dir;
  Decided d;
  d.engine.pid = ::getpid();
  d.decide({.loader_protocol = true, .attach_sockets = {dir.path() + "/nobody.sock"}});
  EXPECT_EQ(d.path, "cold");
}

TEST(ReadyPath, AnAnswerForAnEngineThatIsGoneIsDropped) {
  test::TempDir dir;
  Decided d;
  d.engine.pid = ::getpid();
  d.now = nullptr;  // restarted meanwhile
  d.decide({.loader_protocol = true, .attach_sockets = {dir.path() + "/nobody.sock"}});
  EXPECT_FALSE(d.path.has_value());
  Decided stopping;
  stopping.engine.pid = ::getpid();
  stopping.engine.stop_requested = true;
  stopping.decide({.loader_protocol = true, .attach_sockets = {dir.path() + "/nobody.sock"}});
  EXPECT_FALSE(stopping.path.has_value());
}

}  // namespace attach_path_test
}  // namespace fr::supervisor
