// Publish-then-attach through a real fastrestart-weightd (host backend), and disk vs attach answers.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "engine_process.h"
#include "tinyengine/checkpoint.h"
#include "support/harness.h"

namespace fr::te::test {
namespace {

using nlohmann::json;

bool have_weightd() { return access(fr::test::weightd().c_str(), X_OK) == 0; }

// The daemon refuses a socket directory more open than 0700.
std::string private_dir(const fr::test::TempDir& d) {
  const std::string p = d / "run";
  ::mkdir(p.c_str(), 0700);
  return p;
}

std::vector<std::string> fastrestart_args(const std::string& socket_dir, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"--load-format", "fastrestart", "--fastrestart-socket-dir", socket_dir};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// Starts an engine, checks it is ready, returns (its /stats, its answer to a fixed prompt), then stops it.
std::pair<json, Answer> run_once(const std::string& model, const std::vector<std::string>& args) {
  Engine e(model, args);
  EXPECT_TRUE(e.wait_ready(30)) << e.log();
  auto stats = e.get("/stats").second;
  auto [st, c] = e.post("/v1/completions", completion_request("The weights must match", 12));
  EXPECT_EQ(st, 200) << c.dump();
  e.signal(SIGTERM);
  EXPECT_EQ(e.wait_exit(10), 0) << e.log();
  return {stats, st == 200 ? answer_of(c) : Answer{}};
}

TEST(TinyEngineWeightd, PublishThenAttachGivesTheDiskAnswer) {
  if (!have_weightd()) GTEST_SKIP() << "fastrestart-weightd is not built";
  fr::test::TempDir tmp;
  const std::string sockets = private_dir(tmp);
  fr::test::Daemon d(sockets);
  const std::string& model = tiny_checkpoint();

  auto [disk_stats, disk] = run_once(model, {});
  EXPECT_EQ(disk_stats["load"]["path"], "disk");

  auto [cold, cold_answer] = run_once(model, fastrestart_args(sockets));
  EXPECT_EQ(cold["load"]["path"], "fallback") << cold.dump();
  EXPECT_FALSE(cold["load"]["reason"].get<std::string>().empty());
  EXPECT_EQ(cold["load"]["published"], true) << cold.dump() << d.log();
  EXPECT_EQ(cold_answer, disk);

  auto [warm, warm_answer] = run_once(model, fastrestart_args(sockets));
  EXPECT_EQ(warm["load"]["path"], "attach") << warm.dump() << d.log();
  EXPECT_EQ(warm["load"]["mode"], "zero_copy");
  EXPECT_EQ(warm["load"]["digest"], cold["load"]["digest"]);
  // Only the headers came from disk: the weights came from the daemon's pool.
  EXPECT_LT(warm["load"]["disk_bytes_read"].get<uint64_t>(), 16384u);
  EXPECT_FALSE(warm["load"]["phases"].contains("disk_read_s"));
  EXPECT_EQ(warm_answer, disk);

  auto [copy, copy_answer] =
      run_once(model, fastrestart_args(sockets, {"--fastrestart-mode", "copy", "--fastrestart-verify"}));
  EXPECT_EQ(copy["load"]["path"], "attach") << copy.dump();
  EXPECT_EQ(copy["load"]["mode"], "copy");
  EXPECT_EQ(copy_answer, disk);
}

TEST(TinyEngineWeightd, ChangedCheckpointMissesAndServesTheNewWeights) {
  if (!have_weightd()) GTEST_SKIP() << "fastrestart-weightd is not built";
  fr::test::TempDir tmp, ckpt;
  const std::string sockets = private_dir(tmp);
  fr::test::Daemon d(sockets);
  GenOptions o;
  ASSERT_TRUE(generate_checkpoint(o, ckpt.path()).ok());
  auto [first, a1] = run_once(ckpt.path(), fastrestart_args(sockets));
  EXPECT_EQ(first["load"]["published"], true) << first.dump();
  o.seed = 99;  // same layout, other weights: a new file (new inode/ctime)
  ASSERT_TRUE(generate_checkpoint(o, ckpt.path()).ok());
  auto [second, a2] = run_once(ckpt.path(), fastrestart_args(sockets));
  EXPECT_EQ(second["load"]["path"], "fallback") << second.dump();
  EXPECT_NE(a1, a2);
  auto [disk, a3] = run_once(ckpt.path(), {});
  EXPECT_EQ(a2, a3);
}

TEST(TinyEngineWeightd, NoDaemonFallsBackToDiskWithAReason) {
  fr::test::TempDir tmp;
  const std::string sockets = private_dir(tmp);  // nobody listens here
  auto [stats, answer] = run_once(tiny_checkpoint(), fastrestart_args(sockets, {"--fastrestart-connect-timeout", "0.5"}));
  EXPECT_EQ(stats["load"]["path"], "fallback") << stats.dump();
  EXPECT_FALSE(stats["load"]["reason"].get<std::string>().empty());
  EXPECT_EQ(stats["load"]["published"], false);
  EXPECT_FALSE(stats["load"]["publish_error"].get<std::string>().empty());
  EXPECT_EQ(answer, run_once(tiny_checkpoint(), {}).second);
}

TEST(TinyEngineWeightd, NoDaemonWithFallbackOffFailsToStart) {
  fr::test::TempDir tmp;
  const std::string sockets = private_dir(tmp);
  Engine e(tiny_checkpoint(),
           fastrestart_args(sockets, {"--fastrestart-fallback", "off", "--fastrestart-connect-timeout", "0.5"}));
  EXPECT_EQ(e.wait_exit(10), 1) << e.log();
  EXPECT_NE(e.log().find("fastrestart attach"), std::string::npos) << e.log();
}

// The publish rule end to end: a shard replaced (or rewritten in place, mtime restored) while the engine
// reads the next one is not published; the engine serves what it read, and the next start loads and
// publishes the files as they are now, matching a disk load.
void shard_changed_during_the_cold_start(void (*change)(const std::string& shard, const std::string& other),
                                         const std::string& field) {
  if (!have_weightd()) GTEST_SKIP() << "fastrestart-weightd is not built";
  fr::test::TempDir tmp, ckpt, next;
  const std::string sockets = private_dir(tmp);
  fr::test::Daemon d(sockets);
  GenOptions o;
  o.shard_bytes = 256 << 10;  // a few shards: the engine pauses after each but the last
  auto files = generate_checkpoint(o, ckpt.path());
  ASSERT_TRUE(files.ok());
  ASSERT_GE(files->size(), 2u);
  o.seed = 99;  // the same layout, other weights: "the next training step"
  auto other = generate_checkpoint(o, next.path());
  ASSERT_TRUE(other.ok());
  const Answer before = run_once(ckpt.path(), {}).second;

  ::setenv("FASTRESTART_TEST_READ_DELAY_MS", "3000", 1);
  Engine e(ckpt.path(), fastrestart_args(sockets));
  ::unsetenv("FASTRESTART_TEST_READ_DELAY_MS");
  const std::string first = (*files)[0];
  const std::string sign = "test: read " + first + ";";
  for (int i = 0; i < 6000 && e.log().find(sign) == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_NE(e.log().find(sign), std::string::npos) << e.log();
  change(first, (*other)[0]);  // the engine has read this shard and is reading the next

  ASSERT_TRUE(e.wait_ready(60)) << e.log();
  auto stats = e.get("/stats").second;
  EXPECT_EQ(stats["load"]["path"], "fallback") << stats.dump();
  EXPECT_EQ(stats["load"]["published"], false) << stats.dump();
  const std::string why = stats["load"]["publish_error"].get<std::string>();
  EXPECT_NE(why.find(first), std::string::npos) << why;
  EXPECT_NE(why.find(field + " differs"), std::string::npos) << why;
  auto [st, c] = e.post("/v1/completions", completion_request("The weights must match", 12));
  ASSERT_EQ(st, 200);
  EXPECT_EQ(answer_of(c), before);  // it serves what it read
  e.signal(SIGTERM);
  EXPECT_EQ(e.wait_exit(10), 0);
  auto status = fr::test::run({fr::test::weightctl(), "--socket-dir", sockets, "status", "--json"});
  ASSERT_EQ(status.exit_code, 0) << status.output;
  EXPECT_TRUE(json::parse(status.output)["entries"].empty()) << status.output;

  auto [cold, cold_answer] = run_once(ckpt.path(), fastrestart_args(sockets));
  EXPECT_EQ(cold["load"]["path"], "fallback") << cold.dump();
  EXPECT_EQ(cold["load"]["published"], true) << cold.dump();
  auto [warm, warm_answer] = run_once(ckpt.path(), fastrestart_args(sockets));
  EXPECT_EQ(warm["load"]["path"], "attach") << warm.dump();
  const Answer disk = run_once(ckpt.path(), {}).second;
  EXPECT_NE(disk, before);
  EXPECT_EQ(cold_answer, disk);
  EXPECT_EQ(warm_answer, disk);
}

TEST(TinyEngineWeightd, AShardRenamedOverDuringTheColdStartIsNotPublished) {
  shard_changed_during_the_cold_start(
      [](const std::string& shard, const std::string& other) { std::filesystem::rename(other, shard); }, "ino");
}

TEST(TinyEngineWeightd, AShardRewrittenInPlaceWithItsMtimeRestoredIsNotPublished) {
  shard_changed_during_the_cold_start(
      [](const std::string& shard, const std::string&) { fr::test::rewrite_in_place_keeping_mtime(shard); }, "ctime_ns");
}



// The first life holds the weights once: after its publish a zero_copy engine re-binds to the daemon's
// pool and frees its own copy (private memory falls below the weights' size), and still answers as a
// disk load does. In copy mode it keeps its own, as it must.
// Under ASan or TSan the engine's private memory also holds the sanitizer's shadow and ASan's quarantine
// of freed blocks, so only the normal build can see the own copy go.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

uint64_t rss_anon_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("RssAnon:", 0) == 0) return std::stoull(line.substr(8)) * 1024;
  return 0;
}

TEST(TinyEngineWeightd, AfterItsPublishAZeroCopyEngineServesFromTheDaemonsCopyAndFreesItsOwn) {
  if (!have_weightd()) GTEST_SKIP() << "fastrestart-weightd is not built";
  fr::test::TempDir tmp, ckpt;
  const std::string sockets = private_dir(tmp);
  fr::test::Daemon d(sockets);
  GenOptions o;
  o.config = config_for_size(o.config, 96ull << 20);
  ASSERT_TRUE(generate_checkpoint(o, ckpt.path()).ok());
  const Answer disk = run_once(ckpt.path(), {}).second;

  Engine e(ckpt.path(), fastrestart_args(sockets));
  ASSERT_TRUE(e.wait_ready(60)) << e.log();
  auto stats = e.get("/stats").second;
  EXPECT_EQ(stats["load"]["path"], "fallback") << stats.dump();
  EXPECT_EQ(stats["load"]["published"], true) << stats.dump();
  EXPECT_EQ(stats["load"]["adopted"], true) << stats.dump();
  const uint64_t weights = stats["load"]["weight_bytes"].get<uint64_t>();
  ASSERT_GT(weights, 64ull << 20);
  if (!kSanitized) {
    EXPECT_LT(rss_anon_bytes(e.pid()), weights / 2) << "the engine still holds its own copy of the weights";
  }
  auto [st, c] = e.post("/v1/completions", completion_request("The weights must match", 12));
  ASSERT_EQ(st, 200);
  EXPECT_EQ(answer_of(c), disk);
  e.signal(SIGTERM);
  EXPECT_EQ(e.wait_exit(10), 0);

  fr::test::TempDir tmp2;
  const std::string sockets2 = private_dir(tmp2);
  fr::test::Daemon d2(sockets2);
  Engine copy(ckpt.path(), fastrestart_args(sockets2, {"--fastrestart-mode", "copy"}));
  ASSERT_TRUE(copy.wait_ready(60)) << copy.log();
  auto cs = copy.get("/stats").second;
  EXPECT_EQ(cs["load"]["published"], true) << cs.dump();
  EXPECT_EQ(cs["load"]["adopted"], false) << cs.dump();
  EXPECT_GT(rss_anon_bytes(copy.pid()), weights);
  copy.signal(SIGTERM);
  EXPECT_EQ(copy.wait_exit(10), 0);
}

// A checkpoint read through a symlink that is retargeted while the engine reads it (the way versions are
// rolled: `current -> v2`). The engine must serve and publish one version, the one it began with: a
// later start on that version's own files attaches bytes equal to its disk load, never a mix.
// `layout` builds the path the engine is given from the two versions' directories and returns the
// function that retargets it.
using Retarget = std::function<void()>;
void symlink_retargeted_during_the_cold_start(
    Retarget (*layout)(const std::string& dir, const std::string& v1, const std::string& v2, const std::vector<std::string>& files1)) {
  if (!have_weightd()) GTEST_SKIP() << "fastrestart-weightd is not built";
  fr::test::TempDir tmp, v1, v2, links;
  const std::string sockets = private_dir(tmp);
  fr::test::Daemon d(sockets);
  GenOptions o;
  o.shard_bytes = 256 << 10;  // a few shards: the engine pauses after each but the last
  auto files = generate_checkpoint(o, v1.path());
  ASSERT_TRUE(files.ok());
  ASSERT_GE(files->size(), 2u);
  o.seed = 99;  // the same layout, other weights: the next version
  ASSERT_TRUE(generate_checkpoint(o, v2.path()).ok());
  const Answer answer1 = run_once(v1.path(), {}).second;
  ASSERT_NE(answer1, run_once(v2.path(), {}).second);

  const Retarget retarget = layout(links.path(), v1.path(), v2.path(), *files);
  const std::string model = links / "current";
  ::setenv("FASTRESTART_TEST_READ_DELAY_MS", "3000", 1);
  Engine e(model, fastrestart_args(sockets));
  ::unsetenv("FASTRESTART_TEST_READ_DELAY_MS");
  for (int i = 0; i < 6000 && e.log().find("test: read ") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_NE(e.log().find("test: read "), std::string::npos) << e.log();
  retarget();  // the engine has read the first shard and is about to read the next

  ASSERT_TRUE(e.wait_ready(60)) << e.log();
  auto [st, c] = e.post("/v1/completions", completion_request("The weights must match", 12));
  ASSERT_EQ(st, 200);
  EXPECT_EQ(answer_of(c), answer1) << "the engine mixed two versions of the checkpoint";
  e.signal(SIGTERM);
  EXPECT_EQ(e.wait_exit(10), 0);

  // What was published (if anything) is the first version's: a start on its own files attaches it, or
  // loads it from disk; either way the answer is the first version's.
  auto [again, again_answer] = run_once(v1.path(), fastrestart_args(sockets));
  EXPECT_EQ(again_answer, answer1) << again.dump();
}

TEST(TinyEngineWeightd, ACheckpointDirectorySymlinkRetargetedDuringTheColdStartPublishesOneVersion) {
  symlink_retargeted_during_the_cold_start([](const std::string& dir, const std::string& v1, const std::string& v2,
                                              const std::vector<std::string>&) -> Retarget {
    std::filesystem::create_directory_symlink(v1, dir + "/current");
    return [dir, v2] {  // rename(2) over the link: atomic, as a deployment tool does it
      std::filesystem::create_directory_symlink(v2, dir + "/next");
      std::filesystem::rename(dir + "/next", dir + "/current");
    };
  });
}

TEST(TinyEngineWeightd, AShardSymlinkRetargetedDuringTheColdStartPublishesOneVersion) {
  symlink_retargeted_during_the_cold_start([](const std::string& dir, const std::string& v1, const std::string& v2,
                                              const std::vector<std::string>& files1) -> Retarget {
    // A directory of per-file symlinks into a content store (as the Hugging Face cache lays out a
    // snapshot); the last shard's link, not yet read when the engine pauses, is retargeted.
    const std::string cur = dir + "/current";
    std::filesystem::create_directory(cur);
    for (const auto& f : files1) {
      const std::string name = std::filesystem::path(f).filename();
      std::filesystem::create_symlink(v1 + "/" + name, cur + "/" + name);
    }
    const std::string last = std::filesystem::path(files1.back()).filename();
    return [cur, v2, last] {
      std::filesystem::create_symlink(v2 + "/" + last, cur + "/.next");
      std::filesystem::rename(cur + "/.next", cur + "/" + last);
    };
  });
}

}  // namespace
}  // namespace fr::te::test
