// The two steps every path served by a part shares (StartHost::part). The paths by id are the table's
// (paths.cc).
#include <string>

#include "supervisor/start/start_path.h"

namespace fr::supervisor {

std::optional<StartRefusal> part_refusal(const StartHost& host, StartPath path) {
  const StartPart* p = host.part(path);
  if (!p) return StartRefusal{"unavailable", std::string("this supervisor has no part for the path ") + start_path_name(path)};
  return p->refusal();
}

Result<StartOutcome> start_part(StartHost& host, StartPath path) {
  StartPart* p = host.part(path);
  if (!p) return make_error(Errc::kUnsupported, std::string("this supervisor has no part for the path ") + start_path_name(path));
  FR_TRY(p->start());
  return StartOutcome::kStarted;
}

}  // namespace fr::supervisor
