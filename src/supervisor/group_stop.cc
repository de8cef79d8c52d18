#include "supervisor/group_stop.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include "supervisor/child.h"

namespace fr::supervisor {

void stop_group(Timer& kill_timer, const GroupStop& s) {
  if (s.pgid <= 0) return;
  spdlog::info("stopping {} {} (SIGTERM{}, SIGKILL after {} s)", s.what, s.pgid,
               s.term_to == TermTo::kLeader ? " to its leader" : "", s.grace_s);
  if (s.term_to == TermTo::kGroup)
    signal_group(s.pgid, s.pidfd, SIGTERM);
  else
    ::kill(s.pgid, SIGTERM);
  kill_timer.start(s.grace_s, [pgid = s.pgid, grace = s.grace_s, what = s.what] {
    if (!group_alive(pgid)) return;
    spdlog::warn("{} {} still alive after {} s: SIGKILL", what, pgid, grace);
    signal_group(pgid, -1, SIGKILL);
  });
}

}  // namespace fr::supervisor
