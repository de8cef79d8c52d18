// The tiny engine's progress lines reach fastrestartd's status while it starts (docs/supervisor.md,
// "Engine progress").
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "support/fastrestartd_config.h"
#include "support/harness.h"
#include "support/supervised.h"

namespace fr {
namespace {

using nlohmann::json;

TEST(EngineProgressE2e, TheTinyEnginesDiskReadReachesTheStatusText) {
  test::TempDir d;
  const uint16_t port = test::free_port();
  ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", d / "model", "--size", "8M"}).exit_code, 0);
  test::FastrestartdConfig c(d.path());
  c.tiny_engine({.binary = FR_TINYENGINE_BIN, .model = d / "model", .port = port, .name = ""}).text("weights", "mode", "off");
  const auto sup = test::start_fastrestartd(FR_FASTRESTARTD_BIN, c);
  ASSERT_TRUE(sup->wait_for([](const json& s) { return s.value("state", "") == "ready"; }, 60)) << sup->log();
  // The last progress line (done == total) is always printed, before the engine listens.
  EXPECT_NE(sup->log().find("status: Starting the engine (cold): disk_read 100% ("), std::string::npos) << sup->log();
}

}  // namespace
}  // namespace fr
