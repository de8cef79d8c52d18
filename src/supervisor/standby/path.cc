// The start path "standby": open the gate of a standby engine that did its slow, GPU-free work (and, at
// level warmed, its attach and warm-up) in advance (docs/standby.md). It can serve only while a standby
// is parked on the current flags; a release that fails falls back to the next listed path.
#include "supervisor/start/start_path.h"

namespace fr::supervisor {

const StartPathImpl& standby_start_path() {
  static const PartStartPath<StartPath::kStandby> p;
  return p;
}

}  // namespace fr::supervisor
