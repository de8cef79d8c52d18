// The engine's flags and their reload (src/supervisor/reload/reload.h) on their own: the pending reload,
// its waiters, the last ready flags, flags.json and the rollback rule, driven as the Supervisor drives
// them (begin, ready, after_exit, close), without a process.
#include "supervisor/reload/reload.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>

#include "common/atomic_file.h"
#include "support/harness.h"
#include "supervisor/reload/flags_file.h"

namespace fr::supervisor {
namespace {

using nlohmann::json;

FlagList flags(std::vector<std::string> words) {
  auto f = FlagList::from_words(std::move(words), "flags");
  EXPECT_TRUE(f.ok()) << f.error().message;
  return f.ok() ? std::move(*f) : FlagList{};
}

struct Waiting {
  Reload::Waiter waiter = std::make_shared<std::promise<json>>();
  std::future<json> reply = waiter->get_future();
  bool answered() const { return reply.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
};

class ReloadTest : public ::testing::Test {
 protected:
  test::TempDir dir;
  std::string path = dir / "flags.json";
  FlagList config = flags({"--model", "m", "--max-num-seqs", "8"});
  FlagList pushed = flags({"--model", "m", "--max-num-seqs", "16"});
};

TEST_F(ReloadTest, WithoutAFlagsFileTheConfigsFlagsRunAndCountAsReady) {
  Reload r(path, config);
  EXPECT_EQ(r.flags(), config);
  EXPECT_EQ(r.last_ready_flags(), config);
  EXPECT_FALSE(r.pending());
  EXPECT_FALSE(r.on_trial());
}

TEST_F(ReloadTest, PushedFlagsOnDiskRunWhileTheConfigsFlagsAreThoseTheyWerePushedOn) {
  ASSERT_TRUE(save_pushed_flags(path, pushed, config).ok());
  EXPECT_EQ(Reload(path, config).flags(), pushed);
  EXPECT_EQ(Reload(path, config).last_ready_flags(), pushed);
  // The config's own flags changed since the push: they win.
  const FlagList edited = flags({"--model", "other"});
  EXPECT_EQ(Reload(path, edited).flags(), edited);
}

TEST_F(ReloadTest, AWarmPushRunsAtOnceAndIsWrittenAndAnsweredWhenAnEngineIsReadyOnIt) {
  Reload r(path, config);
  Waiting w;
  r.begin(pushed, /*cold=*/false, 10.0, w.waiter);
  EXPECT_EQ(r.flags(), pushed);               // the next engine starts on them
  EXPECT_EQ(r.last_ready_flags(), config);    // not ready yet
  EXPECT_TRUE(r.pending());
  EXPECT_TRUE(r.on_trial());
  EXPECT_FALSE(r.cold());
  EXPECT_TRUE(r.started_reply().is_null());   // the waiter is answered later
  EXPECT_FALSE(w.answered());
  EXPECT_FALSE(load_pushed_flags(path, config));  // nothing written before READY

  const ReadyOutcome out = r.ready(pushed, "warm", 12.5, config);
  EXPECT_EQ(out.outcome, "warm");
  EXPECT_FALSE(out.rollback);
  EXPECT_FALSE(r.pending());
  EXPECT_EQ(r.last_ready_flags(), pushed);
  ASSERT_TRUE(w.answered());
  const json reply = w.reply.get();
  EXPECT_EQ(reply["ok"], true);
  EXPECT_EQ(reply["path"], "warm");
  EXPECT_EQ(reply["cold_reload"], false);
  EXPECT_EQ(reply["rolled_back"], false);
  EXPECT_DOUBLE_EQ(reply["time_to_ready_s"].get<double>(), 2.5);
  EXPECT_EQ(reply["flags"], json(pushed.words()));
  EXPECT_FALSE(reply.contains("error"));
  // On disk, private, for the next fastrestartd on the same config.
  EXPECT_EQ(load_pushed_flags(path, config), pushed);
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(ReloadTest, WithoutAWaiterTheRequestIsAnsweredThatTheReloadStarted) {
  Reload r(path, config);
  r.begin(pushed, /*cold=*/true, 0, nullptr);
  EXPECT_EQ(r.started_reply(), (json{{"ok", true}, {"message", "reload started"}, {"cold", true}}));
  EXPECT_EQ(r.ready(pushed, "cold", 1, config).outcome, "cold");
  EXPECT_TRUE(r.started_reply().is_null());  // none pending
}

TEST_F(ReloadTest, AFailedEngineOnTheNewFlagsRollsBackOnceToTheLastReadyOnes) {
  Reload r(path, config);
  Waiting w;
  r.begin(pushed, /*cold=*/true, 0, w.waiter);
  // A requested exit (the restart onto the new flags) is no verdict on them.
  EXPECT_FALSE(r.after_exit(false, "requested", ""));
  EXPECT_TRUE(r.on_trial());

  const auto rb = r.after_exit(true, "crash", "exit code 1");
  ASSERT_TRUE(rb);
  EXPECT_EQ(rb->cause, "crash");
  EXPECT_EQ(rb->detail, "exit code 1");
  EXPECT_EQ(rb->rejected_flags, pushed.redacted());
  EXPECT_TRUE(rb->cold);  // the daemons were reloaded for the new flags: again for the old ones
  EXPECT_EQ(r.flags(), config);
  EXPECT_FALSE(r.on_trial());
  EXPECT_TRUE(r.pending());  // answered once the engine is ready on the old flags
  // The engine on the old flags failing too is a failure of the running configuration, not a second rollback.
  EXPECT_FALSE(r.after_exit(true, "crash", "exit code 1"));
  EXPECT_FALSE(w.answered());

  const ReadyOutcome out = r.ready(config, "cold", 5, config);
  EXPECT_EQ(out.outcome, "rolled_back");
  EXPECT_FALSE(out.rollback);
  ASSERT_TRUE(w.answered());
  const json reply = w.reply.get();
  EXPECT_EQ(reply["ok"], false);
  EXPECT_EQ(reply["rolled_back"], true);
  EXPECT_EQ(reply["flags"], json(config.words()));
  EXPECT_EQ(reply["error"]["code"], "rolled_back");
  EXPECT_EQ(reply["error"]["message"],
            "the new flags never became ready (crash: exit code 1); rolled back to the last flags that were ready, and "
            "the engine is ready on them again");
  EXPECT_FALSE(load_pushed_flags(path, config));  // the rejected flags were never written
}

TEST_F(ReloadTest, WithoutAPendingReloadAFailureRollsNothingBack) {
  Reload r(path, config);
  EXPECT_FALSE(r.after_exit(true, "crash", "exit code 1"));
  const ReadyOutcome out = r.ready(config, "warm", 1, config);
  EXPECT_FALSE(out.outcome);
  EXPECT_FALSE(out.rollback);
  EXPECT_FALSE(load_pushed_flags(path, config));  // a start on unchanged flags writes nothing
}

TEST_F(ReloadTest, NewFlagsThatCannotBeWrittenAreRolledBackAndTheReasonAnsweredAtTheNextReady) {
  // flags.json's directory is a regular file: the write fails whoever runs the test.
  { std::ofstream(dir / "state") << "not a directory"; }
  Reload r(dir / "state/flags.json", config);
  Waiting w;
  r.begin(pushed, /*cold=*/false, 0, w.waiter);
  const ReadyOutcome first = r.ready(pushed, "warm", 1, config);
  EXPECT_FALSE(first.outcome);
  ASSERT_TRUE(first.rollback);
  EXPECT_EQ(first.rollback->cause, "unpersisted");
  EXPECT_NE(first.rollback->detail.find(dir / "state/flags.json"), std::string::npos) << first.rollback->detail;
  EXPECT_FALSE(first.rollback->cold);
  EXPECT_EQ(r.flags(), config);              // the flags on disk (none: the config's) run again
  EXPECT_EQ(r.last_ready_flags(), config);
  EXPECT_TRUE(r.pending());
  EXPECT_FALSE(w.answered());

  const ReadyOutcome second = r.ready(config, "warm", 3, config);
  EXPECT_EQ(second.outcome, "rolled_back");
  ASSERT_TRUE(w.answered());
  const json reply = w.reply.get();
  EXPECT_EQ(reply["ok"], false);
  EXPECT_EQ(reply["error"]["message"], first.rollback->detail +
                                           "; rolled back to the last flags that were ready, and the engine is ready on them again");
}

TEST_F(ReloadTest, TheLoopsEndCancelsTheWaiters) {
  Reload r(path, config);
  Waiting w;
  r.begin(pushed, false, 0, w.waiter);
  r.close();
  EXPECT_FALSE(r.pending());
  ASSERT_TRUE(w.answered());
  EXPECT_EQ(w.reply.get(), (json{{"ok", false}, {"error", {{"code", "cancelled"}, {"message", "the supervisor stopped"}}}}));
  r.close();  // nothing pending: nothing to answer
}

TEST_F(ReloadTest, ASecretFlagIsRedactedInTheReplyAndTheRollback) {
  const FlagList secret = flags({"--model", "m", "--api-key", "hunter2"});
  Reload r(path, config);
  Waiting w;
  r.begin(secret, false, 0, w.waiter);
  const auto rb = r.after_exit(true, "crash", "exit code 1");
  ASSERT_TRUE(rb);
  EXPECT_EQ(json(rb->rejected_flags).dump().find("hunter2"), std::string::npos);
  r.ready(config, "warm", 1, config);
  EXPECT_EQ(w.reply.get()["error"].dump().find("hunter2"), std::string::npos);
  Waiting again;
  r.begin(secret, false, 0, again.waiter);
  r.ready(secret, "warm", 1, config);
  EXPECT_EQ(again.reply.get()["flags"].dump().find("hunter2"), std::string::npos);
  EXPECT_EQ(load_pushed_flags(path, config), secret);  // on disk as pushed (the file is private)
}

TEST(FlagsFile, AWordThatIsNotAStringLeavesTheConfigsFlags) {
  test::TempDir dir;
  const auto config = flags({"--model", "m"});
  ASSERT_TRUE(write_file_atomic(dir / "flags.json", json{{"flags", {"--model", 7}}, {"config_flags", config.words()}}.dump()).ok());
  EXPECT_FALSE(load_pushed_flags(dir / "flags.json", config));
  ASSERT_TRUE(write_file_atomic(dir / "flags.json", "not json").ok());
  EXPECT_FALSE(load_pushed_flags(dir / "flags.json", config));
  EXPECT_EQ(Reload(dir / "flags.json", config).flags(), config);
}

}  // namespace
}  // namespace fr::supervisor
