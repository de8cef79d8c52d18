// The start paths by id: adding a path is its file and one line here (plus its name in config.h's StartPath).
// And the two steps every path served by a part shares (StartHost::part).
#include <cstdlib>
#include <string>

#include "supervisor/start/start_path.h"

namespace fr::supervisor {

const StartPathImpl& start_path(StartPath id) {
  switch (id) {
    case StartPath::kSnapshot: return snapshot_start_path();
    case StartPath::kWarm: return warm_start_path();
    case StartPath::kCold: return cold_start_path();
    case StartPath::kStandby: return standby_start_path();
  }
  std::abort();  // every StartPath is listed above (-Wswitch)
}

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
