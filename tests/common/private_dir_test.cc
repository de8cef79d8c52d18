#include "common/private_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/harness.h"

namespace fr {
namespace {

mode_t mode_of(const std::string& p) {
  struct stat st {};
  ::lstat(p.c_str(), &st);
  return st.st_mode & 07777;
}

TEST(PrivateDir, CreatesWith0700) {
  test::TempDir d;
  ASSERT_TRUE(ensure_private_dir(d / "run", std::nullopt).ok());
  EXPECT_EQ(mode_of(d / "run"), 0700u);
  EXPECT_TRUE(ensure_private_dir(d / "run", std::nullopt).ok());  // idempotent
}

TEST(PrivateDir, GroupModeIs0750) {
  test::TempDir d;
  ASSERT_TRUE(ensure_private_dir(d / "run", ::getegid()).ok());
  EXPECT_EQ(mode_of(d / "run"), 0750u);
}

TEST(PrivateDir, RefusesSymlink) {
  test::TempDir d;
  ::mkdir((d / "real").c_str(), 0700);
  ASSERT_EQ(::symlink((d / "real").c_str(), (d / "link").c_str()), 0);
  auto s = ensure_private_dir(d / "link", std::nullopt);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("symlink"), std::string::npos) << s.error().message;
}

TEST(PrivateDir, RefusesWorldWritableAndNamesTheMode) {
  test::TempDir d;
  ::mkdir((d / "open").c_str(), 0700);
  ::chmod((d / "open").c_str(), 0777);
  auto s = ensure_private_dir(d / "open", std::nullopt);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("0777"), std::string::npos) << s.error().message;
  EXPECT_EQ(mode_of(d / "open"), 0777u) << "must not be 'fixed' silently";
}

TEST(PrivateDir, RefusesADirectoryOfAnotherOwner) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  test::TempDir d;
  ::mkdir((d / "theirs").c_str(), 0700);
  ASSERT_EQ(::chown((d / "theirs").c_str(), 65534, 65534), 0);
  auto s = ensure_private_dir(d / "theirs", std::nullopt);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("owned by uid 65534"), std::string::npos) << s.error().message;
}

TEST(LockFile, SecondHolderIsBusyAndNamesTheFirst) {
  test::TempDir d;
  auto a = LockFile::acquire(d / "x.lock");
  ASSERT_TRUE(a.ok());
  auto b = LockFile::acquire(d / "x.lock");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code, Errc::kBusy);
  EXPECT_NE(b.error().message.find(std::to_string(::getpid())), std::string::npos) << b.error().message;
}

}  // namespace
}  // namespace fr
