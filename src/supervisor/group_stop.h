// Stopping a supervised child's process group: SIGTERM now, then SIGKILL to the whole group once a grace has
// passed while any member still lives. The engine, the standby, the vLLM preload and the front all stop this
// way, so each says the same in the log and none leaves a member of its group behind after its grace
// (ARCHITECTURE.md, "Stop order").
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
