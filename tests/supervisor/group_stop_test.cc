// Stopping a child's process group (supervisor/group_stop.h) on a running loop, with real process groups: a
// SIGTERM to the whole group or to its leader alone, the SIGKILL to the whole group once the grace has
// passed while any member lives, and no SIGKILL once the caller stops the timer.
#include "supervisor/group_stop.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <functional>
#include <map>

namespace fr::supervisor {
namespace group_stop_test {

// A group of its own: a leader with SIGTERM's default action and one member it forks, which ignores SIGTERM
// when `member_ignores_term`. Both wait a minute at most, should the test fail. Returns the group's id once
// the member is set up (it says so through a pipe): no sleep stands in for that.
pid_t group_of_two(bool member_ignores_term) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (::fork() == 0) {
      if (member_ignores_term) ::signal(SIGTERM, SIG_IGN);
      (void)!::write(ready[1], "m", 1);
      for (int i = 0; i < 600; ++i) ::usleep(100'000);
      ::_exit(0);
    }
    for (int i = 0; i < 600; ++i) ::usleep(100'000);
    ::_exit(0);
  }
  ::setpgid(pid, pid);  // either side may run first: both set it
  ::close(ready[1]);
  char c = 0;
  (void)!::read(ready[0], &c, 1);
  ::close(ready[0]);
  return pid;
}

bool alive(pid_t pgid) { return ::kill(-pgid, 0) == 0 || errno != ESRCH; }

// The test is a child subreaper, as fastrestartd is: the member, once its leader is gone, is its child.
struct Fixture {
  Loop loop;
  Timer kill_timer{loop};
  std::map<pid_t, int> reaped;  // pid -> wait status, every child reaped while the loop ran

  Fixture() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }
  // Runs the loop, reaping, until `stop` says so (checked every 10 ms) or `limit_s` passes; the seconds it ran.
  double run_until(const std::function<bool()>& stop, double limit_s = 10) {
    uv_update_time(loop.get());
    const double t0 = loop.now_s();
    Timer poll(loop), limit(loop);
    poll.start(0.01, [&] {
      int st = 0;
      for (pid_t p; (p = ::waitpid(-1, &st, WNOHANG)) > 0;) reaped[p] = st;
      if (stop()) loop.stop();
    }, 0.01);
    limit.start(limit_s, [this] { loop.stop(); });
    loop.run();
    return loop.now_s() - t0;
  }
  bool killed_by(pid_t pid, int sig) const {
    auto it = reaped.find(pid);
    return it != reaped.end() && WIFSIGNALED(it->second) && WTERMSIG(it->second) == sig;
  }
  // The member's status: the one reaped child other than the leader.
  int member_signal(pid_t leader) const {
    for (const auto& [pid, st] : reaped)
      if (pid != leader) return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    return -1;
  }
};

TEST(GroupStop, ASigtermToTheWholeGroupEndsEveryMemberThatHeedsIt) {
  Fixture f;
  const pid_t pgid = group_of_two(/*member_ignores_term=*/false);
  ASSERT_GT(pgid, 0);
  uv_update_time(f.loop.get());  // libuv times from the loop's cached clock
  stop_group(f.kill_timer, {.pgid = pgid, .grace_s = 5, .what = "the test group"});
  const double took = f.run_until([&] { return !alive(pgid) && f.reaped.size() >= 2; });
  EXPECT_TRUE(f.killed_by(pgid, SIGTERM));
  EXPECT_EQ(f.member_signal(pgid), SIGTERM);
  EXPECT_LT(took, 4.0) << "the group waited for the SIGKILL";
}

TEST(GroupStop, ALeadersSigtermSparesTheMembersUntilTheGraceThenTheGroupIsKilled) {
  Fixture f;
  const pid_t pgid = group_of_two(/*member_ignores_term=*/false);
  ASSERT_GT(pgid, 0);
  uv_update_time(f.loop.get());
  const double t0 = f.loop.now_s();
  stop_group(f.kill_timer, {.pgid = pgid, .grace_s = 1.0, .what = "the test group", .term_to = TermTo::kLeader});
  f.run_until([&] { return f.reaped.count(pgid) > 0; });
  ASSERT_TRUE(f.killed_by(pgid, SIGTERM)) << "the leader did not get the SIGTERM";
  EXPECT_TRUE(alive(pgid)) << "the SIGTERM reached the member too";
  f.run_until([&] { return f.reaped.size() >= 2; });
  EXPECT_EQ(f.member_signal(pgid), SIGKILL);
  EXPECT_GE(f.loop.now_s() - t0, 0.9) << "the member was killed before the grace was over";
  EXPECT_FALSE(alive(pgid));
}

TEST(GroupStop, StoppingTheTimerDropsTheSigkill) {
  Fixture f;
  const pid_t pgid = group_of_two(/*member_ignores_term=*/true);
  ASSERT_GT(pgid, 0);
  uv_update_time(f.loop.get());
  stop_group(f.kill_timer, {.pgid = pgid, .grace_s = 0.2, .what = "the test group", .term_to = TermTo::kLeader});
  f.kill_timer.stop();  // as a caller does once the group is reaped and done
  f.run_until([] { return false; }, 0.6);
  EXPECT_TRUE(f.killed_by(pgid, SIGTERM)) << "the leader did not get the SIGTERM";
  EXPECT_TRUE(alive(pgid)) << "killed although its timer was stopped";
  ::kill(-pgid, SIGKILL);
  f.run_until([&] { return f.reaped.size() >= 2; });
}

}  // namespace group_stop_test
}  // namespace fr::supervisor
