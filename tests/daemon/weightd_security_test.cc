// Who may talk to a fastrestart-weightd, and where it agrees to put its socket (docs/protocol.md, "Socket directory").
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/harness.h"

namespace fr {
namespace {

constexpr int kNobody = 65534;

TEST(WeightdSecurity, PeerOfAnotherUidIsRefusedAndLogged) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run the daemon as nobody";
  test::TempDir d;
  ::mkdir((d / "run").c_str(), 0700);
  ASSERT_EQ(::chown((d / "run").c_str(), kNobody, kNobody), 0);
  // The daemon runs as nobody; we (root, uid 0) can reach its socket, but are not its uid.
  test::Daemon daemon(d / "run", {}, kNobody, kNobody);
  auto r = test::run({test::weightctl(), "--socket-dir", d / "run", "status"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("peer uid 0 is not allowed"), std::string::npos) << r.output;
  EXPECT_NE(daemon.log().find("refused a client"), std::string::npos) << daemon.log();
  // The same uid is served.
  auto ok = test::run({test::weightctl(), "--socket-dir", d / "run", "status"}, kNobody, kNobody);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

TEST(WeightdSecurity, NobodyCannotReachARootDaemon) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  test::TempDir d;
  test::Daemon daemon(d / "run");
  auto r = test::run({test::weightctl(), "--socket-dir", d / "run", "status"}, kNobody, kNobody);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("Permission denied"), std::string::npos) << r.output;
}

TEST(WeightdSecurity, SymlinkedSocketDirectoryIsRefused) {
  test::TempDir d;
  ::mkdir((d / "real").c_str(), 0700);
  ASSERT_EQ(::symlink((d / "real").c_str(), (d / "run").c_str()), 0);
  auto r = test::run({test::weightd(), "--backend", "host", "--socket-dir", d / "run"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is a symlink"), std::string::npos) << r.output;
}

TEST(WeightdSecurity, WorldWritableSocketDirectoryIsRefused) {
  test::TempDir d;
  ::mkdir((d / "run").c_str(), 0700);
  ::chmod((d / "run").c_str(), 0777);
  auto r = test::run({test::weightd(), "--backend", "host", "--socket-dir", d / "run"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("mode 0777"), std::string::npos) << r.output;
}

// Group-writable is as bad as world-writable: a group member could swap the socket (docs/reliability.md).
TEST(WeightdSecurity, GroupWritableSocketDirectoryIsRefusedEvenWithAGroup) {
  test::TempDir d;
  ::mkdir((d / "run").c_str(), 0700);
  ::chmod((d / "run").c_str(), 0770);
  for (std::vector<std::string> group : {std::vector<std::string>{}, {"--group", std::to_string(::getegid())}}) {
    std::vector<std::string> argv{test::weightd(), "--backend", "host", "--socket-dir", d / "run"};
    argv.insert(argv.end(), group.begin(), group.end());
    auto r = test::run(argv);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("mode 0770"), std::string::npos) << r.output;
  }
}

TEST(WeightdSecurity, SocketAndDirectoryModes) {
  test::TempDir d;
  test::Daemon daemon(d / "run");
  struct stat st {};
  ASSERT_EQ(::stat((d / "run").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(::stat(daemon.socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST(WeightdSecurity, GroupMembersAreServedWithGroupModes) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  test::TempDir d;
  // Group "nogroup" (65534): nobody's primary group.
  test::Daemon daemon(d / "run", {"--group", std::to_string(kNobody)});
  struct stat st {};
  ASSERT_EQ(::stat((d / "run").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  EXPECT_EQ(st.st_gid, static_cast<gid_t>(kNobody));
  ASSERT_EQ(::stat(daemon.socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  auto ok = test::run({test::weightctl(), "--socket-dir", d / "run", "status"}, kNobody, kNobody);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

}  // namespace
}  // namespace fr
