// Manifest codec, atomic write, field-naming errors; the store's layout, listing, lock and delete.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "snapshot/break_even.h"
#include "snapshot/manifest.h"
#include "snapshot/oracle.h"
#include "snapshot/store.h"
#include "support/harness.h"

namespace fr::snapshot {
namespace {

using nlohmann::json;

Manifest sample(const std::string& id = "20261130-081500") {
  Manifest m;
  m.id = id;
  m.fastrestart_version = "0.1.0";
  m.created_unix = 1796000000;
  m.create_s = 2.5;
  m.image_bytes = 1 << 20;
  m.stdout_pipe = "pipe:[1234]";
  m.host = "127.0.0.1";
  m.port = 8000;
  m.identity.kernel_release = "6.18";
  m.identity.criu_version = "4.2.1";
  m.identity.executable = "/bin/engine";
  m.identity.executable_hash = "00";
  m.oracle = {"The capital of France is", "t", 4, {41, 32, 80, 97}, ") Pa", {-3.38, -1.5, -0.25, -0.125}};
  m.timings = {{"criu_dump_s", 1.0}};
  return m;
}

TEST(Manifest, WritesAtomicallyPrivateAndReadsBack) {
  test::TempDir dir;
  ASSERT_TRUE(write_manifest(dir.path(), sample()).ok());
  struct stat st{};
  ASSERT_EQ(::stat((dir / "manifest.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(std::filesystem::exists(dir / "manifest.json.tmp"));
  auto m = read_manifest(dir.path());
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(to_json(*m), to_json(sample()));
}

TEST(Manifest, ErrorsNameTheFileAndField) {
  test::TempDir dir;
  json j = to_json(sample());
  j["identity"]["args"] = json::array({"serve", 5});
  std::ofstream(dir / "manifest.json") << j.dump();
  auto m = read_manifest(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, Errc::kCorrupt);
  EXPECT_EQ(m.error().message, dir / "manifest.json" + ": manifest.identity.args[1]: expected a string");
}

TEST(Manifest, RefusesAnotherFormatAndBrokenJson) {
  test::TempDir dir;
  json j = to_json(sample());
  j["format"] = 2;
  std::ofstream(dir / "manifest.json") << j.dump();
  auto m = read_manifest(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("manifest.format: is 2, this build reads format 1"), std::string::npos);
  std::ofstream(dir / "manifest.json") << "{";
  m = read_manifest(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("not valid JSON"), std::string::npos);
}

// Found by fuzz_manifest (fuzz/regressions/fuzz_manifest/): a manifest nested 100000 deep was parsed
// whole and then copied (timings, weights), a recursion per level: fastrestartd, which lists and reads
// the manifests of its snapshot directory, died of a stack overflow on one damaged artifact.
TEST(Manifest, ADeeplyNestedManifestIsCorruptNotACrash) {
  test::TempDir dir;
  json j = to_json(sample());
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::string text = j.dump();
  text.replace(text.find("{\"criu_dump_s\":1.0}"), std::string("{\"criu_dump_s\":1.0}").size(), "{\"criu_dump_s\":" + deep + "}");
  std::ofstream(dir / "manifest.json") << text;
  auto m = read_manifest(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, Errc::kCorrupt);
  EXPECT_EQ(m.error().message, dir / "manifest.json" + ": manifest nests deeper than 32 levels");
}

TEST(Oracle, MismatchesAreExplained) {
  Oracle want = sample().oracle;
  EXPECT_EQ(oracle_mismatch(want, want), std::nullopt);
  Oracle got = want;
  got.logprobs[2] += kLogprobTolerance / 2;
  EXPECT_EQ(oracle_mismatch(want, got), std::nullopt);
  got.logprobs[2] += 1e-2;
  ASSERT_TRUE(oracle_mismatch(want, got).has_value());
  EXPECT_NE(oracle_mismatch(want, got)->find("log-probability of token 2"), std::string::npos);
  got = want;
  got.token_ids[1] = 33;
  EXPECT_NE(oracle_mismatch(want, got)->find("token ids"), std::string::npos);
}

TEST(BreakEven, RestoresNeededFromMeasuredTimes) {
  // 60 s to create, each restore saves 30 - 5 = 25 s: three restores pay it back.
  EXPECT_EQ(break_even(60, 5, 30, "warm").restores, 3);
  EXPECT_EQ(break_even(50, 5, 30, "warm").restores, 2);
  auto slower = break_even(1, 3, 2, "warm");
  EXPECT_FALSE(slower.restores.has_value());
  EXPECT_EQ(slower.note, "a snapshot restore is not faster than a warm start here");
  auto unknown = break_even(1, 0, 2, "cold");
  EXPECT_FALSE(unknown.restores.has_value());
  EXPECT_NE(unknown.note.find("needs one measured snapshot restore"), std::string::npos);
}

TEST(Store, CommitsAtomicallyListsNewestFirstAndDeletes) {
  test::TempDir root;
  Store store(root / "snaps");
  for (const char* id : {"20261130-081500", "20261130-091500"}) {
    auto tmp = store.begin(id);
    ASSERT_TRUE(tmp.ok()) << tmp.error().message;
    EXPECT_TRUE(store.list().size() < 2);  // in creation: not listed
    ASSERT_TRUE(write_manifest(*tmp, sample(id)).ok());
    ASSERT_TRUE(store.commit(id).ok());
  }
  struct stat st{};
  ASSERT_EQ(::stat((root / "snaps").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto all = store.list();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, "20261130-091500");
  EXPECT_TRUE(all[0].manifest.ok());
  ASSERT_TRUE(store.remove("20261130-091500").ok());
  EXPECT_EQ(store.list().size(), 1u);
}

TEST(Store, OneRestoreAtATimeAndNoDeleteDuringIt) {
  test::TempDir root;
  Store store(root / "snaps");
  ASSERT_TRUE(store.begin("a").ok());
  ASSERT_TRUE(store.commit("a").ok());
  auto held = store.lock("a");
  ASSERT_TRUE(held.ok()) << held.error().message;
  auto second = store.lock("a");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, Errc::kBusy);
  EXPECT_NE(second.error().message.find("is being restored"), std::string::npos);
  auto del = store.remove("a");
  ASSERT_FALSE(del.ok());
  EXPECT_EQ(del.error().code, Errc::kBusy);
}

TEST(Store, RejectsIdsThatLeaveTheDirectory) {
  test::TempDir root;
  Store store(root / "snaps");
  ASSERT_TRUE(store.ensure().ok());
  for (const char* bad : {"../x", ".hidden", "a/b", ""}) {
    EXPECT_FALSE(valid_id(bad)) << bad;
    EXPECT_FALSE(store.lock(bad).ok()) << bad;
  }
}

TEST(Store, RefusesADirectoryOthersCanRead) {
  test::TempDir root;
  ASSERT_EQ(::mkdir((root / "snaps").c_str(), 0755), 0);
  auto s = Store(root / "snaps").ensure();
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace fr::snapshot
