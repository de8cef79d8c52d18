// Stopping a supervised child's process group: SIGTERM now, then SIGKILL to the whole group once a grace has
// passed while any member still lives. The engine, the standby, the vLLM preload and the front stop this way
// when they are asked to (the native weight daemons, each a process of its own, are stopped by pid), so each
// says the same in the log (ARCHITECTURE.md, "Stop order"). A caller that stops the timer early (the leader
// reaped) takes over its group's leftovers: the engine's drain does; the front has none of its own.
#pragma once

#include <sys/types.h>

#include <string>

#include "supervisor/loop.h"

namespace fr::supervisor {

// Who gets the SIGTERM: the whole group, or its leader alone (a leader that stops its own children in
// order, such as vLLM's preload or the front draining its requests).
enum class TermTo { kGroup, kLeader };

struct GroupStop {
  pid_t pgid = 0;     // the group's id: its leader's pid
  int pidfd = -1;     // the leader's pidfd when held (reaches it even if it left the group), else -1
  double grace_s = 0;
  std::string what;   // names the group in the log ("the engine's process group")
  TermTo term_to = TermTo::kGroup;
};

// Sends the SIGTERM and arms kill_timer for the SIGKILL. The caller owns the timer: stopping or destroying
// it drops the SIGKILL (a group that is reaped and done needs none).
void stop_group(Timer& kill_timer, const GroupStop& s);

}  // namespace fr::supervisor
