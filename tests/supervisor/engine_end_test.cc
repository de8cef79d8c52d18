// The engine's stop and drain (supervisor/engine_end.h) on a running loop, with real process groups: a
// SIGTERM the group ignores ends in SIGKILL after the grace, a drain waits for every process of the group and
// kills one that outlives its leader, and the GPU memory check waits for the memory to come back (or for
// memory.settle_timeout_s), unless a standby's release follows.
#include "supervisor/engine_end.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <map>
#include <memory>

namespace fr::supervisor {
namespace engine_end_test {

constexpr uint64_t kMiB = 1048576;

class SetGpus final : public GpuProbe {
 public:
  std::map<std::string, uint64_t> used;
  Result<GpuMemory> memory(const std::string& gpu) override {
    auto it = used.find(gpu);
    if (it == used.end()) return make_error(Errc::kNotFound, "no GPU " + gpu);
    return GpuMemory{80000 * kMiB, it->second, 0, "GPU-" + gpu, "test"};
  }
};

class SetHost final : public EngineEndHost {
 public:
  bool release = false;
  uint64_t daemon_bytes = 0;
  std::set<pid_t> known_children() const override { return {}; }
  bool stopping() const override { return false; }
  bool release_follows() const override { return release; }
  uint64_t daemon_gpu_bytes(const std::string&) const override { return daemon_bytes; }
  uint64_t standby_gpu_bytes(const std::string&) const override { return 0; }
};

struct Fixture {
  Loop loop;
  Config cfg;
  SetGpus gpus;
  SetHost host;
  std::unique_ptr<EngineEnd> end;

  Fixture() {
    cfg.engine.stop_grace_s = 0.3;
    cfg.memory.settle_timeout_s = 0.6;
    cfg.memory.leak_tolerance_mib = 1;
    end = std::make_unique<EngineEnd>(loop, cfg, gpus, host);
  }
  // The drain tests: the test is a child subreaper, as fastrestartd is, so a group member whose leader is
  // gone becomes its child, and reaps every child in run_until (a zombie still counts as the group's).
  bool reap_all = false;
  void as_subreaper() {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    reap_all = true;
  }
  // Runs the loop until `stop` says so (checked every 10 ms) or `limit_s` passes; returns the seconds it ran.
  double run_until(const std::function<bool()>& stop, double limit_s = 10) {
    const double t0 = loop.now_s();
    Timer poll(loop), limit(loop);
    poll.start(0.01, [&] {
      while (reap_all && ::waitpid(-1, nullptr, WNOHANG) > 0) {
      }
      if (stop()) loop.stop();
    }, 0.01);
    limit.start(limit_s, [this] { loop.stop(); });
    loop.run();
    return loop.now_s() - t0;
  }
  // Drains `pgid`; returns the seconds until `done` ran, or -1 when it did not within `limit_s`.
  double drain(pid_t pgid, double limit_s = 10) {
    bool done = false;
    end->drain(pgid, [&done] { done = true; });
    const double took = run_until([&] { return done; }, limit_s);
    return done ? took : -1;
  }
};

// A child leading a group of its own with one more member, forked by the leader: the leader runs
// `leader_body`, the member `member_body`; each exits after. Returns the leader's pid (the group's id).
pid_t group_of_two(void (*leader_body)(), void (*member_body)()) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (::fork() == 0) {
      member_body();
      ::_exit(0);
    }
    leader_body();
    ::_exit(0);
  }
  ::setpgid(pid, pid);  // either side may run first: both set it
  return pid;
}

void nothing() {}
void sleep_a_while() { ::usleep(400'000); }
void ignore_term_and_wait() {
  ::signal(SIGTERM, SIG_IGN);
  for (int i = 0; i < 600; ++i) ::usleep(100'000);  // a minute at most, should the test fail
}

bool alive(pid_t pgid) { return ::kill(-pgid, 0) == 0 || errno != ESRCH; }

// Reaps the leader when it has exited; its wait status (-1: still running).
int reaped(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, WNOHANG) == pid ? status : -1;
}

TEST(EngineEnd, TerminateSigkillsAGroupThatIgnoresSigtermOnceTheGraceHasPassed) {
  Fixture f;
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  const pid_t pgid = group_of_two(ignore_term_and_wait, ignore_term_and_wait);
  ::usleep(200'000);  // both ignore SIGTERM by now
  uv_update_time(f.loop.get());  // libuv times from the loop's cached clock, 0.2 s stale after the sleep
  f.end->terminate(pgid, -1, /*kill_now=*/false);
  int status = -1;
  const double took = f.run_until([&] { return (status = reaped(pgid)) != -1; });
  ASSERT_NE(status, -1) << "the group outlived SIGTERM and the grace";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_GE(took, 0.25) << "killed before the grace of 0.3 s was over";
  // The other member went with it (reparented to the test, a subreaper, and reaped here).
  f.run_until([&] {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    return !alive(pgid);
  });
  EXPECT_FALSE(alive(pgid)) << "the group's other member lives on";
}

TEST(EngineEnd, TerminateWithKillNowEndsTheGroupAtOnce) {
  Fixture f;
  const pid_t pgid = group_of_two(ignore_term_and_wait, ignore_term_and_wait);
  f.end->terminate(pgid, -1, /*kill_now=*/true);
  int status = -1;
  const double took = f.run_until([&] { return (status = reaped(pgid)) != -1; });
  ASSERT_NE(status, -1);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_LT(took, 0.25);
}

TEST(EngineEnd, TheDrainWaitsForEveryProcessOfTheGroup) {
  Fixture f;
  f.cfg.weights.backend = "host";  // no GPU memory to wait for
  f.as_subreaper();
  const pid_t pgid = group_of_two(nothing, sleep_a_while);
  f.run_until([&] { return ::kill(pgid, 0) != 0; });  // the leader is gone (reaped); its member sleeps on
  ASSERT_TRUE(alive(pgid));
  const double took = f.drain(pgid);
  ASSERT_GE(took, 0) << "the drain never finished";
  EXPECT_FALSE(alive(pgid)) << "done came while the group still had a process";
  EXPECT_GT(took, 0.1);
}

TEST(EngineEnd, TheDrainKillsAMemberThatOutlivesItsLeaderByTheGrace) {
  Fixture f;
  f.cfg.weights.backend = "host";
  f.as_subreaper();
  const pid_t pgid = group_of_two(nothing, ignore_term_and_wait);
  f.run_until([&] { return ::kill(pgid, 0) != 0; });
  const double took = f.drain(pgid);
  ASSERT_GE(took, 0) << "the drain waited on a member that never exits";
  EXPECT_FALSE(alive(pgid));
  EXPECT_GE(took, 0.3);
  EXPECT_LT(took, 5.0);
}

TEST(EngineEnd, TheDrainWaitsForGpuMemoryToComeBackToWhatWasUsedBeforeTheEngine) {
  Fixture f;
  f.cfg.gpus = {"0"};
  f.host.daemon_bytes = 1000 * kMiB;
  f.gpus.used["0"] = 1500 * kMiB;  // the daemon's 1000 MiB and 500 MiB of others'
  f.end->note_engine_spawn();
  f.gpus.used["0"] = 9000 * kMiB;  // the engine's memory, not freed yet at its exit
  Timer freed(f.loop);
  freed.start(0.3, [&] { f.gpus.used["0"] = 1500 * kMiB; });
  const double took = f.drain(-1);
  ASSERT_GE(took, 0);
  EXPECT_GE(took, 0.25) << "done before the memory came back";
  EXPECT_LT(took, 0.55) << "the drain did not see the memory come back";
}

TEST(EngineEnd, TheDrainGivesUpOnGpuMemoryAfterTheSettleTimeout) {
  Fixture f;
  f.cfg.gpus = {"0"};
  f.gpus.used["0"] = 1000 * kMiB;
  f.end->note_engine_spawn();
  f.gpus.used["0"] = 3000 * kMiB;  // a leak: never freed
  const double took = f.drain(-1);
  ASSERT_GE(took, 0) << "the drain waited past memory.settle_timeout_s";
  EXPECT_GE(took, 0.55);
}

TEST(EngineEnd, ADrainBeforeAStandbysReleaseWaitsForNoMemory) {
  Fixture f;
  f.cfg.gpus = {"0"};
  f.gpus.used["0"] = 1000 * kMiB;
  f.end->note_engine_spawn();
  f.gpus.used["0"] = 3000 * kMiB;
  f.host.release = true;
  const double took = f.drain(-1);
  ASSERT_GE(took, 0);
  EXPECT_LT(took, 0.3);
}

}  // namespace engine_end_test
}  // namespace fr::supervisor
