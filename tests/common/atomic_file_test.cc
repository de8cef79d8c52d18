// State files are replaced atomically, and a failed write leaves the old content and no temporary
// (common/atomic_file.h).
#include "common/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common/io.h"
#include "support/harness.h"

namespace fr {
namespace {

TEST(AtomicFile, ReplacesTheContentWithTheMode) {
  test::TempDir d;
  const std::string p = d / "flags.json";
  ASSERT_TRUE(write_file_atomic(p, "one", 0600).ok());
  ASSERT_TRUE(write_file_atomic(p, "two", 0600).ok());
  EXPECT_EQ(*read_file(p, 64), "two");
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_NE(::access((p + ".tmp").c_str(), F_OK), 0);
}

TEST(AtomicFile, AFailureNamesTheFileAndTheErrnoAndLeavesNoTemporary) {
  test::TempDir d;
  const std::string p = d / "flags.json";
  ASSERT_TRUE(write_file_atomic(p, "old", 0600).ok());
  // The rename cannot replace a directory: the step after the write fails, the temporary must go.
  const std::string dir_target = d / "sub";
  ASSERT_EQ(::mkdir(dir_target.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((dir_target + "/x").c_str(), 0700), 0);
  auto st = write_file_atomic(dir_target, "new", 0600);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("rename " + dir_target + ".tmp to " + dir_target + ": "), std::string::npos)
      << st.error().message;
  EXPECT_NE(::access((dir_target + ".tmp").c_str(), F_OK), 0) << "the temporary was left";
  auto missing = write_file_atomic(d / "no/such/dir/f", "x", 0600);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "open " + (d / "no/such/dir/f.tmp") + ": No such file or directory");
  EXPECT_EQ(*read_file(p, 64), "old");
}

}  // namespace
}  // namespace fr
