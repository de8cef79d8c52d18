// The snapshots part (snapshots/snapshots.h) through a fake SnapshotHost: no supervisor, a stand-in criu
// that only prints its version, and a stand-in helper that writes the result the test gives it. What the
// part decides is checked: its refusals, the restore's outcome told to the host (a failure names the
// artifact, which is not tried again), an exit reaped before the helper named the pid, a failed create
// answered and the engine resumed, the control op's refusals, status.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/snapshots/snapshots.h"
#include "support/harness.h"

namespace fr::supervisor {
namespace {

using nlohmann::json;

class FakeSnapshotHost final : public SnapshotHost, public RestoreHost {
 public:
  Config cfg;
  Loop event_loop;
  Stats counted;
  std::vector<std::string> calls;  // the host steps the part took, in order
  std::vector<Event> events;
  std::string status_text, result;  // result: what the stand-in helper writes (FAKE_RESULT)
  bool serving = true, reloading = false, present = true;
  DumpTarget target{4242, true, -1};
  std::optional<int> restored_exit;
  pid_t restored_pid = -1;
  std::string failure;
  UniqueFd restore_output;

  void raise(Event e) override { events.push_back(e); }
  void set_status(const std::string& s, const std::string&) override { status_text = s; }
  EngineCommand engine_command(bool) override { return {{"/bin/true", "--model", "m"}, {{"FAKE_RESULT", result}}, false}; }
  bool engine_serving() const override { return serving; }
  std::string reported_state() const override { return "starting"; }
  bool reload_running() const override { return reloading; }
  void restoring_engine(const std::string& id) override { calls.push_back("restoring " + id); }
  void restore_spawned(UniqueFd output) override {
    calls.push_back("restore_spawned");
    restore_output = std::move(output);
  }
  void restore_not_spawned() override { calls.push_back("restore_not_spawned"); }
  bool engine_present() const override { return present; }
  void restored(pid_t pid, std::optional<int> exited) override {
    calls.push_back("restored");
    restored_pid = pid;
    restored_exit = exited;
  }
  void restore_failed(const std::string& detail) override {
    calls.push_back("restore_failed");
    failure = detail;
  }
  DumpTarget dump_target() const override { return target; }
  void dump_begins() override { calls.push_back("dump_begins"); }
  void dump_failed() override { calls.push_back("dump_failed"); }
  void create_finished() override { calls.push_back("create_finished"); }
};

void write_script(const std::string& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body;
  ::chmod(path.c_str(), 0755);
}

class SnapshotsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    write_script(dir / "criu", "echo 'Version: 4.2'\n");
    // Writes $FAKE_RESULT (the engine's environment, which the helper gets) to the --result path.
    write_script(dir / "helper",
                 "while [ $# -gt 0 ]; do [ \"$1\" = --result ] && out=$2; shift; done\n"
                 "[ -n \"$FAKE_RESULT\" ] && printf '%s' \"$FAKE_RESULT\" > \"$out\"\nexit 0\n");
    host.cfg.restart.start = {StartPath::kSnapshot, StartPath::kCold};
    host.cfg.snapshot.criu = dir / "criu";
    host.cfg.snapshot.helper_path = dir / "helper";
    host.cfg.snapshot.dir = dir / "snapshots";
    host.cfg.control.state_dir = dir / "state";
  }
  // Reaps the helper the part started and tells the part, as the supervisor's SIGCHLD handler does.
  void finish_helper() {
    std::set<pid_t> known;
    snaps.add_known_pids(known);
    ASSERT_EQ(known.size(), 1u) << "no helper runs";
    int status = 0;
    ASSERT_EQ(::waitpid(*known.begin(), &status, 0), *known.begin());
    EXPECT_TRUE(snaps.on_exit(*known.begin(), status));
  }
  void add_artifact(const std::string& id) { std::filesystem::create_directories(dir / ("snapshots/" + id)); }

  test::TempDir dir;
  FakeSnapshotHost host;
  Snapshots snaps{host, host, {host.event_loop, host.cfg}, host.counted};
};

TEST_F(SnapshotsTest, NotListedInRestartStartIsUnavailableAndChangesNoEngine) {
  host.cfg.restart.start = {StartPath::kWarm, StartPath::kCold};
  snaps.init();
  EXPECT_FALSE(snaps.wanted());
  auto why = snaps.refusal();
  ASSERT_TRUE(why);
  EXPECT_EQ(why->code, "unavailable");
  EXPECT_EQ(why->detail, "snapshots are not available: restart.start does not list \"snapshot\"");
  std::map<std::string, std::string> env;
  snaps.add_engine_env(env);
  EXPECT_TRUE(env.empty()) << "an engine that is never dumped keeps io_uring";
  const json r = snaps.handle({{"op", "snapshot"}, {"action", "list"}}, nullptr);
  EXPECT_EQ(r["error"]["code"], "unsupported");
  EXPECT_EQ(snaps.status()["enabled"], false);
}

TEST_F(SnapshotsTest, ACriuThatCannotRunMakesThemUnavailableWithItsReason) {
  host.cfg.snapshot.criu = dir / "no-criu";
  snaps.init();
  EXPECT_TRUE(snaps.wanted());
  auto why = snaps.refusal();
  ASSERT_TRUE(why);
  EXPECT_EQ(why->code, "unavailable");
  EXPECT_NE(why->detail.find("criu not found at " + (dir / "no-criu")), std::string::npos) << why->detail;
  EXPECT_NE(snaps.status()["problem"].get<std::string>().find("criu not found"), std::string::npos);
}

TEST_F(SnapshotsTest, UsableWithoutAnArtifactRefusesNoArtifact) {
  snaps.init();
  auto why = snaps.refusal();
  ASSERT_TRUE(why);
  EXPECT_EQ(why->code, "no_artifact");
  EXPECT_EQ(why->detail, "no snapshot in " + (dir / "snapshots"));
  const json st = snaps.status();
  EXPECT_EQ(st["enabled"], true);
  EXPECT_EQ(st["criu_version"], "4.2");
  std::map<std::string, std::string> env;
  host.cfg.weights.mode = WeightsMode::kZeroCopy;
  snaps.add_engine_env(env);
  EXPECT_EQ(env["UV_USE_IO_URING"], "0");
  EXPECT_EQ(env["FASTRESTART_SNAPSHOT_SOCKET"], (dir / "snapshots") + "/.engine.sock");
}

TEST_F(SnapshotsTest, AFailedRestoreFallsBackWithItsReasonAndIsNotTriedAgain) {
  snaps.init();
  add_artifact("20260101-000000");
  ASSERT_FALSE(snaps.refusal());
  host.result = R"({"ok":false,"error":"the oracle's tokens differ"})";
  ASSERT_TRUE(snaps.start().ok());
  EXPECT_EQ(host.calls, (std::vector<std::string>{"restoring 20260101-000000", "restore_spawned"}));
  auto busy = snaps.refusal();
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->code, "busy");
  EXPECT_EQ(snaps.status()["job"], "restore");
  finish_helper();
  EXPECT_EQ(host.calls.back(), "restore_failed");
  EXPECT_EQ(host.failure, "snapshot 20260101-000000 not restored: the oracle's tokens differ");
  const json st = snaps.status();
  EXPECT_EQ(st["fallbacks"], 1);
  EXPECT_EQ(st["last_failure"]["id"], "20260101-000000");
  EXPECT_TRUE(st["job"].is_null());
  EXPECT_EQ(snaps.counts().fallbacks, 1u);
  auto why = snaps.refusal();
  ASSERT_TRUE(why);
  EXPECT_EQ(why->code, "no_artifact");
  EXPECT_EQ(why->detail, "no snapshot in " + (dir / "snapshots") + " that has not failed here");
}

TEST_F(SnapshotsTest, AHelperThatLeavesNoResultFailsTheRestore) {
  snaps.init();
  add_artifact("a1");
  host.result = "";
  ASSERT_TRUE(snaps.start().ok());
  finish_helper();
  EXPECT_EQ(host.failure.rfind("snapshot a1 not restored: fastrestart-snapshot restore exited with ", 0), 0u) << host.failure;
  EXPECT_NE(host.failure.find("and left no result"), std::string::npos);
}

TEST_F(SnapshotsTest, ARestoredEngineReapedBeforeItsPidWasKnownIsToldAsExited) {
  snaps.init();
  add_artifact("a1");
  host.result = R"({"ok":true,"pid":999999})";
  ASSERT_TRUE(snaps.start().ok());
  snaps.keep_exit(999999, 9);  // SIGKILL'd before the helper's result was read
  finish_helper();
  EXPECT_EQ(host.calls.back(), "restored");
  EXPECT_EQ(host.restored_pid, 999999);
  ASSERT_TRUE(host.restored_exit);
  EXPECT_EQ(*host.restored_exit, 9);
  EXPECT_EQ(snaps.counts().restored, 1u);
  EXPECT_EQ(snaps.status()["last_restore"]["id"], "a1");
}

TEST_F(SnapshotsTest, ARestoreForAStoppedEngineIsDropped) {
  snaps.init();
  add_artifact("a1");
  host.result = R"({"ok":true,"pid":999999})";
  ASSERT_TRUE(snaps.start().ok());
  host.present = false;  // the stop ended the engine's record
  finish_helper();
  EXPECT_EQ(host.calls.back(), "restore_spawned");
  EXPECT_EQ(snaps.counts().restored, 0u);
}

TEST_F(SnapshotsTest, ARequestedRestoreIsTheNextIdAndRestartsTheEngine) {
  snaps.init();
  add_artifact("old");
  add_artifact("zz-newest");
  const json r = snaps.handle({{"op", "snapshot"}, {"action", "restore"}, {"id", "old"}}, nullptr);
  EXPECT_EQ(r["ok"], true) << r.dump();
  EXPECT_EQ(host.events, std::vector<Event>{Event::kRestartRequested});
  EXPECT_TRUE(snaps.requested());
  host.result = R"({"ok":false,"error":"x"})";
  ASSERT_TRUE(snaps.start().ok());
  EXPECT_EQ(host.calls.front(), "restoring old");
  EXPECT_FALSE(snaps.requested()) << "a request serves one start";
  finish_helper();
}

TEST_F(SnapshotsTest, CreateAndRestoreNeedAServingEngineAndNoReload) {
  snaps.init();
  add_artifact("a1");
  host.serving = false;
  json r = snaps.handle({{"op", "snapshot"}, {"action", "create"}}, nullptr);
  EXPECT_EQ(r["error"]["code"], "busy");
  EXPECT_EQ(r["error"]["message"], "snapshot create needs a ready engine (the supervisor is starting)");
  host.serving = true;
  host.reloading = true;
  r = snaps.handle({{"op", "snapshot"}, {"action", "restore"}}, nullptr);
  EXPECT_EQ(r["error"]["message"], "a reload is in progress");
  host.reloading = false;
  host.target.in_pid_ns = false;
  r = snaps.handle({{"op", "snapshot"}, {"action", "create"}}, nullptr);
  EXPECT_EQ(r["error"]["code"], "unsupported");
  host.target.in_pid_ns = true;
  host.cfg.gpus = {"0", "1"};
  r = snaps.handle({{"op", "snapshot"}, {"action", "create"}}, nullptr);
  EXPECT_EQ(r["error"]["message"], "snapshots are tensor-parallel 1 only (gpus lists more than one)");
  r = snaps.handle({{"op", "snapshot"}, {"action", "dump"}}, nullptr);
  EXPECT_EQ(r["error"]["message"], "unknown snapshot action \"dump\"");
  EXPECT_TRUE(host.calls.empty()) << "a refused request touches no engine";
}

TEST_F(SnapshotsTest, AFailedCreateAnswersItsWaiterAndTheEngineServesOn) {
  snaps.init();
  host.result = R"({"ok":false,"error":"criu dump failed"})";
  auto waiter = std::make_shared<std::promise<json>>();
  auto answer = waiter->get_future();
  const json r = snaps.handle({{"op", "snapshot"}, {"action", "create"}}, waiter);
  EXPECT_TRUE(r.is_null()) << "answered later: " << r.dump();
  EXPECT_TRUE(snaps.creating());
  EXPECT_EQ(host.status_text, "Creating a snapshot of the engine");
  finish_helper();
  EXPECT_FALSE(snaps.creating());
  EXPECT_EQ(host.calls, (std::vector<std::string>{"dump_begins", "dump_failed", "create_finished"}));
  ASSERT_EQ(answer.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  const json a = answer.get();
  EXPECT_EQ(a["error"]["code"], "snapshot_failed");
  EXPECT_EQ(a["error"]["message"], "criu dump failed");
  EXPECT_EQ(snaps.counts().create_failures, 1u);
}

TEST_F(SnapshotsTest, ACreatedArtifactIsRestoredNextAndTheCreateAnsweredAtReady) {
  snaps.init();
  host.result = R"({"ok":true,"manifest":{"id":"fresh","create_s":1.5,"image_bytes":1000}})";
  auto waiter = std::make_shared<std::promise<json>>();
  auto answer = waiter->get_future();
  ASSERT_TRUE(snaps.handle({{"op", "snapshot"}, {"action", "create"}}, waiter).is_null());
  finish_helper();
  EXPECT_EQ(host.calls.back(), "create_finished");
  EXPECT_TRUE(snaps.requested()) << "the next start restores the new artifact";
  EXPECT_EQ(answer.wait_for(std::chrono::seconds(0)), std::future_status::timeout) << "answered only at READY";
  // The start skipped the path (say, the artifact vanished): the create still succeeded, and says so.
  snaps.after_ready("cold", "skipped", "no snapshot in here", json{{"path", "cold"}});
  const json a = answer.get();
  EXPECT_EQ(a["ok"], true);
  EXPECT_EQ(a["message"], "created snapshot fresh; it was not restored (no snapshot in here): the engine started cold");
  EXPECT_EQ(a["start"]["path"], "cold");
}

}  // namespace
}  // namespace fr::supervisor
