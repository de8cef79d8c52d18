// Finding criu and checking its version: missing, too old, and the one scripts/build-criu.sh builds.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "snapshot/criu.h"
#include "support/harness.h"

namespace fr::snapshot {
namespace {

std::string fake_criu(const test::TempDir& dir, const std::string& version) {
  std::string p = dir / "criu";
  std::ofstream(p) << "#!/bin/sh\necho 'Version: " << version << "'\n";
  ::chmod(p.c_str(), 0755);
  return p;
}

TEST(Criu, MissingSaysWhereAndHowToGetIt) {
  auto c = probe_criu("/nonexistent/criu");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Errc::kNotFound);
  EXPECT_NE(c.error().message.find("criu not found at /nonexistent/criu"), std::string::npos);
  EXPECT_NE(c.error().message.find("scripts/build-criu.sh"), std::string::npos);
}

TEST(Criu, TooOldIsRefusedWithTheVersion) {
  test::TempDir dir;
  auto c = probe_criu(fake_criu(dir, "3.17"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("is 3.17, snapshots need >= 4.1"), std::string::npos) << c.error().message;
}

TEST(Criu, NewEnoughIsAccepted) {
  test::TempDir dir;
  auto c = probe_criu(fake_criu(dir, "4.1"));
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->version, "4.1");
}

TEST(Criu, TheBuiltCriuReportsItsVersion) {
  const char* env = std::getenv("FR_CRIU");
  const std::string path = env ? env : FR_CRIU_BIN;
  if (::access(path.c_str(), X_OK) != 0) GTEST_SKIP() << "no criu at " << path << " (scripts/build-criu.sh builds it)";
  auto c = probe_criu(path);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->version.rfind("4.", 0), 0u) << c->version;
}

}  // namespace
}  // namespace fr::snapshot
