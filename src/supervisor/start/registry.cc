// The start paths by id: adding a path is its file and one line here (plus its name in config.h's StartPath).
#include <cstdlib>

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

}  // namespace fr::supervisor
