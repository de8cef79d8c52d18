#include "supervisor/group_stop.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "supervisor/child.h"

namespace fr::supervisor {

void stop_group(Timer& kill_timer, const GroupStop& s) {
  if (s.pgid <= 0) return;
  spdlog::info("stopping {} {} (SIGTERM{}, SIGKILL after {} s)", s.what, s.pgid,
               s.term_to == TermTo::kLeader ? " to its leader" : "", s.grace_s);
  if (s.term_to == TermTo::kGroup)
    signal_group(s.pgid, s.pidfd, SIGTERM);
  else if (s.pidfd >= 0)
    ::syscall(SYS_pidfd_send_signal, s.pidfd, SIGTERM, nullptr, 0);
  else
    ::kill(s.pgid, SIGTERM);
  // The SIGKILL goes to the group by its id only: the pidfd may be closed (its child reaped) by then.
  kill_timer.start(s.grace_s, [pgid = s.pgid, grace = s.grace_s, what = s.what] {
    if (!group_alive(pgid)) return;
    spdlog::warn("{} {} still alive after {} s: SIGKILL", what, pgid, grace);
    signal_group(pgid, -1, SIGKILL);
  });
}

}  // namespace fr::supervisor
