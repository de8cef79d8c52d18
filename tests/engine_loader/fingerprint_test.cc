// The fingerprint must never hand out wrong weights (vLLM issue #59647; ARCHITECTURE.md, "The fingerprint
// covers content and file identity").
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "fastrestart/engine_loader.h"
#include "support/harness.h"

namespace fastrestart {
namespace {

class Fingerprint : public ::testing::Test {
 protected:
  void SetUp() override {
    ck = fr::test::make_checkpoint(dir.path(), 2, 3, 256 * 1024, 42);
    std::vector<std::string> args;
    for (const auto& f : ck.files) args.insert(args.end(), {"--preload", f});
    args.insert(args.end(), {"--config", "dtype=F32"});
    daemon = std::make_unique<fr::test::Daemon>(dir / "run", args);
    // Wait for the load so every case below asks a ready entry.
    ASSERT_TRUE(attach_now().hit);
  }
  AttachResult attach_now(std::map<std::string, std::string> cfg = {{"dtype", "F32"}}) {
    Options o;
    o.socket_dir = dir / "run";
    auto r = attach({ck.files, cfg}, o);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : AttachResult{};
  }
  // Flips one byte at `offset` of file 0, in place, then restores its mtime as `touch -r` would.
  void flip_in_place_keep_mtime(uint64_t offset) {
    struct stat st {};
    ASSERT_EQ(::stat(ck.files[0].c_str(), &st), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the clock move for ctime
    int fd = ::open(ck.files[0].c_str(), O_RDWR);
    unsigned char b;
    ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(offset)), 1);
    b ^= 0xff;
    ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(offset)), 1);
    timespec times[2] = {st.st_atim, st.st_mtim};
    ASSERT_EQ(::futimens(fd, times), 0);
    ::close(fd);
  }

  fr::test::TempDir dir;
  fr::test::Checkpoint ck;
  std::unique_ptr<fr::test::Daemon> daemon;
};

TEST_F(Fingerprint, UntouchedCheckpointHits) {
  auto r = attach_now();
  EXPECT_TRUE(r.hit);
}

TEST_F(Fingerprint, SameLayoutOneByteChangedFarPastTheFirstKiBIsAMiss) {
  // A "fine-tune": a copy of the checkpoint with identical headers and one byte changed 200 KiB into a
  // tensor. Headers-only or first-KiB fingerprints (vLLM's) would hand out the base model's weights.
  fr::test::TempDir other;
  auto tuned = fr::test::make_checkpoint(other.path(), 2, 3, 256 * 1024, 42);
  auto h = fr::read_safetensors_header(tuned.files[0]);
  ASSERT_TRUE(h.ok());
  const uint64_t off = h->tensors[1].begin + 200 * 1024;
  int fd = ::open(tuned.files[0].c_str(), O_RDWR);
  unsigned char b = 0;
  ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(off)), 1);
  b ^= 1;
  ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(off)), 1);
  ::close(fd);
  Options o;
  o.socket_dir = dir / "run";
  auto r = attach({tuned.files, {{"dtype", "F32"}}}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->hit);
  EXPECT_NE(r->reason.find("differs"), std::string::npos) << r->reason;
  EXPECT_NE(std::find(r->differs.begin(), r->differs.end(), "files[0].path"), r->differs.end());
}

TEST_F(Fingerprint, RewrittenInPlaceWithMtimeRestoredIsAMiss) {
  auto h = fr::read_safetensors_header(ck.files[0]);
  flip_in_place_keep_mtime(h->tensors[2].begin + 100 * 1024);
  auto r = attach_now();
  EXPECT_FALSE(r.hit);
  EXPECT_NE(std::find(r.differs.begin(), r.differs.end(), "files[0].ctime_ns"), r.differs.end());
  EXPECT_EQ(std::find(r.differs.begin(), r.differs.end(), "files[0].mtime_ns"), r.differs.end()) << "mtime was restored";
  EXPECT_NE(r.reason.find("changed since it was loaded"), std::string::npos) << r.reason;
}

TEST_F(Fingerprint, ReplacedByRenameIsAMiss) {
  std::string tmp = ck.files[1] + ".new";
  std::string cmd = "cp -p '" + ck.files[1] + "' '" + tmp + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ASSERT_EQ(::rename(tmp.c_str(), ck.files[1].c_str()), 0);
  auto r = attach_now();
  EXPECT_FALSE(r.hit);
  EXPECT_NE(std::find(r.differs.begin(), r.differs.end(), "files[1].ino"), r.differs.end());
  EXPECT_NE(r.reason.find("replaced"), std::string::npos) << r.reason;
}

TEST_F(Fingerprint, ConfigFieldDifferenceIsNamed) {
  auto r = attach_now({{"dtype", "BF16"}});
  EXPECT_FALSE(r.hit);
  EXPECT_EQ(r.differs, std::vector<std::string>{"config.dtype"});
}


// identify_fds: the identity of what a descriptor reads, whatever the path that opened it leads to later.
TEST(IdentifyFds, ADescriptorOpenedThroughASymlinkKeepsItsFileAfterTheLinkIsRetargeted) {
  fr::test::TempDir dir;
  ::mkdir((dir / "v1").c_str(), 0755);
  ::mkdir((dir / "v2").c_str(), 0755);
  auto v1 = fr::test::make_checkpoint(dir / "v1", 1, 1, 4096, 1);
  auto v2 = fr::test::make_checkpoint(dir / "v2", 1, 1, 4096, 2);
  const std::string link = dir / "current.safetensors";
  ASSERT_EQ(::symlink(v1.files[0].c_str(), link.c_str()), 0);
  const int fd = ::open(link.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const std::string next = dir / "next";
  ASSERT_EQ(::symlink(v2.files[0].c_str(), next.c_str()), 0);
  ASSERT_EQ(::rename(next.c_str(), link.c_str()), 0);  // current -> v2 now

  auto by_fd = identify_fds({{link}, {}}, {fd});
  auto by_path = identify({{link}, {}});
  auto v1_key = identify({{v1.files[0]}, {}});
  ::close(fd);
  ASSERT_TRUE(by_fd.ok() && by_path.ok() && v1_key.ok());
  EXPECT_EQ(by_fd->files, v1_key->files);  // what the descriptor reads: v1
  EXPECT_NE(by_path->files, v1_key->files);  // the path leads to v2 now
}

TEST(IdentifyFds, AFileRenamedOverAfterItWasOpenedCannotBeIdentified) {
  fr::test::TempDir dir;
  ::mkdir((dir / "a").c_str(), 0755);
  ::mkdir((dir / "b").c_str(), 0755);
  auto a = fr::test::make_checkpoint(dir / "a", 1, 1, 4096, 1);
  auto b = fr::test::make_checkpoint(dir / "b", 1, 1, 4096, 2);
  const int fd = ::open(a.files[0].c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::rename(b.files[0].c_str(), a.files[0].c_str()), 0);
  auto k = identify_fds({{a.files[0]}, {}}, {fd});
  ::close(fd);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.error().message.find("removed or replaced after it was opened"), std::string::npos) << k.error().message;
}

TEST(IdentifyFds, OneDescriptorPerFile) {
  fr::test::TempDir dir;
  ::mkdir((dir / "a").c_str(), 0755);
  auto a = fr::test::make_checkpoint(dir / "a", 2, 1, 4096, 1);
  auto k = identify_fds({a.files, {}}, {0});
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.error().message.find("1 descriptors for 2 files"), std::string::npos) << k.error().message;
}

}  // namespace
}  // namespace fastrestart
