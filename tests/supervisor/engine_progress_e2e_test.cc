// The tiny engine's progress lines reach fastrestartd's status while it starts (docs/supervisor.md,
// "Engine progress").
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "support/harness.h"
#include "support/supervised.h"

namespace fr {
namespace {

using nlohmann::json;

TEST(EngineProgressE2e, TheTinyEnginesDiskReadReachesTheStatusText) {
  test::TempDir d;
  const uint16_t port = test::free_port();
  ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", d / "model", "--size", "8M"}).exit_code, 0);
  std::string cfg = d / "t.toml";
  std::ofstream(cfg) << "[engine]\ncommand = [\"" << FR_TINYENGINE_BIN << "\", \"serve\", \"" << (d / "model")
                     << "\"]\nflags = [\"--port\", \"" << port << "\"]\nport = " << port << "\n[weights]\nmode = \"off\"\n"
                     << "[control]\nsocket = \"" << (d / "ctl/t.ctl") << "\"\nstate_dir = \"" << (d / "state") << "\"\n"
                     << "[http]\nlisten = \"none\"\n";
  test::Supervised sup(FR_FASTRESTARTD_BIN, cfg, d / "ctl/t.ctl", d / "d.log");
  sup.start();
  ASSERT_TRUE(sup.wait_for([](const json& s) { return s.value("state", "") == "ready"; }, 60)) << sup.log();
  // The last progress line (done == total) is always printed, before the engine listens.
  EXPECT_NE(sup.log().find("status: Starting the engine (cold): disk_read 100% ("), std::string::npos) << sup.log();
}

}  // namespace
}  // namespace fr
