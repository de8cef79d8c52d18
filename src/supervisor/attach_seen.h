// Did an engine attach? The weight daemons record attaches and misses by client pid (docs/protocol.md,
// status): that is the engine's own attach result, with no need to parse its output.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace fr::supervisor {

struct AttachSeen {
  bool hit = false;
  std::string miss;  // the daemon's reason, when the engine asked and missed
};

// Asks each daemon socket for its status and looks for the records of the engine whose process group is
// `pgid` since `since_unix` (its processes, or a pid of its group). Blocking: run on the thread pool. A
// daemon that cannot be reached or answers no readable status is passed over (logged).
AttachSeen attach_seen(const std::vector<std::string>& sockets, pid_t pgid, double since_unix);

}  // namespace fr::supervisor
