// The standby part (standby/standby.h) through a fake StandbyHost: no supervisor. Its refusals before and
// after a start, a spawn the memory floor refuses (a failure with its reason, then a backoff, then the
// path disabled after standby.max_failures, on again once the flags change), and a real standby (a shell
// that speaks the gate protocol) that parks, is released and handed over as the engine, is discarded and
// replaced, or dies parked.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/standby/standby.h"
#include "support/harness.h"

namespace fr::supervisor {
namespace {

FlagList standby_flags(std::vector<std::string> words) {
  auto f = FlagList::from_words(std::move(words), "flags");
  EXPECT_TRUE(f.ok());
  return f.ok() ? *f : FlagList{};
}

class NoGpus final : public GpuProbe {
 public:
  Result<GpuMemory> memory(const std::string& gpu) override { return make_error(Errc::kNotFound, "no GPU " + gpu); }
};

class FakeStandbyHost final : public StandbyHost {
 public:
  Config cfg;
  NoGpus probe;
  Loop event_loop;
  FlagList flags;
  bool serving = true, stopping = false;
  uint64_t generation = 1;
  std::string share_refused;  // engine_share_refusal()
  std::optional<double> died_at;
  std::unique_ptr<Engine> adopted;
  int gone = 0;
  // The standby's program: parks at pre_gpu (its own pid, the group's leader), then waits.
  std::vector<std::string> argv{"/bin/bash", "-c",
                                R"(printf '{"op":"parked","v":1,"level":"pre_gpu","pid":%s}\n' $$ >&"$FASTRESTART_STANDBY_FD"; exec sleep 60)"};

  const FlagList& engine_flags() const override { return flags; }
  const EngineAdapter& engine_kind() const override { return builtin_engine_adapter(cfg.engine.kind); }
  std::unique_ptr<Engine> new_engine_record() override {
    auto e = std::make_unique<Engine>();
    e->flags = flags;
    return e;
  }
  bool engine_steady() const override { return serving && !stopping; }
  uint64_t daemon_generation() const override { return generation; }
  EngineCommand engine_command(bool) override { return {argv, {}, false}; }
  std::string engine_share_refusal() override { return share_refused; }
  std::optional<double> engine_died_at() const override { return died_at; }
  void adopt_engine(std::unique_ptr<Engine> e) override { adopted = std::move(e); }
  void standby_gone() override { ++gone; }
};

class StandbyPart : public ::testing::Test {
 protected:
  void SetUp() override {
    host.cfg.restart.start = {StartPath::kStandby, StartPath::kCold};
    host.cfg.control.state_dir = dir.path();
    host.cfg.engine.port = 1;  // nothing of ours listens there
    host.flags = standby_flags({"--model", "m"});
  }
  void TearDown() override {
    if (pid > 0) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  // Runs the loop until the standby parks (or 10 s pass): its gate line arrives on the loop.
  bool run_until_parked() {
    Timer poll(host.event_loop), limit(host.event_loop);
    bool parked = false;
    poll.start(0.01, [&] {
      if (!standby.refusal()) {
        parked = true;
        host.event_loop.stop();
      }
    }, 0.01);
    limit.start(10, [&] { host.event_loop.stop(); });
    host.event_loop.run();
    return parked;
  }
  pid_t running_pid() const {
    std::set<pid_t> known;
    standby.add_known_pids(known);
    return known.empty() ? -1 : *known.begin();
  }
  // Reaps the standby as the supervisor's SIGCHLD handler does, and tells the part.
  int reap(pid_t p) {
    int status = 0;
    EXPECT_EQ(::waitpid(p, &status, 0), p);
    if (p == pid) pid = -1;
    EXPECT_TRUE(standby.on_exit(p, status));
    return status;
  }

  test::TempDir dir;
  FakeStandbyHost host;
  Standby standby{host, {host.event_loop, host.cfg}, host.probe};
  pid_t pid = -1;  // a standby the test must clean up
};

TEST_F(StandbyPart, BeforeAnEngineWasReadyThereIsNone) {
  auto why = standby.refusal();
  ASSERT_TRUE(why);
  EXPECT_EQ(why->code, "not_parked");
  EXPECT_EQ(why->detail, "no standby was started yet (one starts once an engine is ready)");
  host.serving = false;
  standby.maybe_spawn();  // no engine serves: none is started behind it
  EXPECT_EQ(standby.refusal()->detail, "no standby was started yet (one starts once an engine is ready)");
  auto st = standby.status();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->state, "off");
  EXPECT_EQ(st->spawns, 0u);
  host.cfg.restart.start = {StartPath::kCold};
  EXPECT_FALSE(standby.status()) << "no standby status unless restart.start lists it";
}

TEST_F(StandbyPart, ASpawnTheMemoryFloorRefusesIsAFailureThenABackoff) {
  host.share_refused = "GPU 0: the share 0.01 is under memory.min_share 0.1";
  standby.maybe_spawn();
  EXPECT_FALSE(standby.alive());
  auto st = standby.status();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->state, "backoff");
  EXPECT_EQ(st->failures.at("spawn"), 1u);
  EXPECT_EQ(st->last_failure, "not started: GPU 0: the share 0.01 is under memory.min_share 0.1");
  EXPECT_EQ(st->failures_in_row, 1);
  EXPECT_GT(st->backoff_s, 0);
  auto why = standby.refusal();
  ASSERT_TRUE(why);
  EXPECT_EQ(why->code, "not_parked");
  EXPECT_EQ(why->detail, "the standby is being started again after: not started: GPU 0: the share 0.01 is under memory.min_share 0.1");
  // A discard cancels the pending respawn: none until the next ready.
  standby.discard("the engine is held");
  EXPECT_EQ(standby.status()->state, "off");
  EXPECT_EQ(standby.refusal()->detail, "no standby is running");
}

TEST_F(StandbyPart, MaxFailuresDisableThePathUntilTheFlagsChange) {
  host.cfg.standby.max_failures = 1;
  host.share_refused = "no room";
  standby.maybe_spawn();
  auto why = standby.refusal();
  ASSERT_TRUE(why);
  EXPECT_EQ(why->code, "unavailable");
  EXPECT_NE(why->detail.find("standby.max_failures 1"), std::string::npos) << why->detail;
  EXPECT_EQ(standby.status()->state, "disabled");
  standby.maybe_spawn();  // the same flags: still off, nothing tried
  EXPECT_EQ(standby.status()->failures.at("spawn"), 1u);
  host.flags = standby_flags({"--model", "m2"});
  standby.maybe_spawn();  // new flags: a new streak, tried again (and refused again)
  EXPECT_EQ(standby.status()->failures.at("spawn"), 2u);
}

TEST_F(StandbyPart, AParkedStandbyIsReleasedAsTheEngine) {
  standby.maybe_spawn();
  pid = running_pid();
  ASSERT_GT(pid, 0);
  EXPECT_EQ(standby.refusal()->detail, "the standby (pid " + std::to_string(pid) + ") has not parked yet");
  ASSERT_TRUE(run_until_parked()) << standby.refusal()->detail;
  EXPECT_EQ(standby.status()->state, "parked");
  host.died_at = host.event_loop.now_s() - 2;
  ASSERT_TRUE(standby.start().ok());
  ASSERT_TRUE(host.adopted) << "the release hands its process over";
  EXPECT_EQ(host.adopted->pid, pid);
  EXPECT_EQ(host.adopted->flags, host.flags);
  EXPECT_FALSE(standby.alive());
  auto st = standby.status();
  EXPECT_EQ(st->state, "off");
  EXPECT_EQ(st->releases, 1u);
  ASSERT_TRUE(st->death_to_release_s);
  EXPECT_GE(*st->death_to_release_s, 2.0);
  standby.after_ready(0.5);
  ASSERT_TRUE(standby.status()->death_to_ready_s);
  EXPECT_DOUBLE_EQ(*standby.status()->death_to_ready_s, *st->death_to_release_s + 0.5);
  EXPECT_FALSE(standby.on_exit(pid, 0)) << "the engine's exit is no longer the standby's";
}

TEST_F(StandbyPart, AStandbyOnOldFlagsIsDiscardedAndReplaced) {
  standby.maybe_spawn();
  pid = running_pid();
  ASSERT_TRUE(run_until_parked());
  host.flags = standby_flags({"--model", "m", "--max-num-seqs", "8"});
  auto why = standby.refusal();
  ASSERT_TRUE(why);
  EXPECT_EQ(why->code, "unavailable") << "a standby on other flags cannot serve";
  standby.maybe_spawn();  // stale: stopped, and its exit starts the next one
  EXPECT_EQ(standby.status()->state, "stopping");
  const pid_t first = pid;
  reap(first);
  pid = running_pid();
  ASSERT_GT(pid, 0);
  EXPECT_NE(pid, first);
  auto st = standby.status();
  EXPECT_EQ(st->state, "starting");
  EXPECT_EQ(st->spawns, 2u);
  EXPECT_TRUE(st->failures.empty()) << "a discard is no failure";
  ASSERT_TRUE(run_until_parked());
}

TEST_F(StandbyPart, ADeathWhileParkedIsAFailureAndTheDaemonsWaitForItsGroup) {
  standby.maybe_spawn();
  pid = running_pid();
  ASSERT_TRUE(run_until_parked());
  ::kill(pid, SIGKILL);
  reap(pid);
  auto st = standby.status();
  EXPECT_EQ(st->state, "backoff");
  EXPECT_EQ(st->failures.at("died"), 1u);
  EXPECT_EQ(st->last_failure.rfind("died while parked: ", 0), 0u) << st->last_failure;
  EXPECT_FALSE(standby.stop_before_daemons("the weight daemons are stopping")) << "nothing runs: the daemons go at once";
  EXPECT_EQ(standby.status()->state, "off") << "the pending respawn is cancelled";
  // One that runs holds the daemons back until its group is gone.
  standby.maybe_spawn();
  pid = running_pid();
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(standby.stop_before_daemons("the weight daemons are stopping"));
  EXPECT_EQ(host.gone, 0);
  reap(pid);
  EXPECT_EQ(host.gone, 1);
  EXPECT_EQ(standby.status()->state, "off");
}

}  // namespace
}  // namespace fr::supervisor
