// The start path "standby": open the gate of a standby engine that did its slow, GPU-free work (and, at
// level warmed, its attach and warm-up) in advance (docs/standby.md). It can serve only while a standby
// is parked on the current flags; a release that fails falls back to the next listed path. Its part, the
// Standby, holds the parked engine.
#include "supervisor/standby/standby.h"
#include "supervisor/start/paths.h"

namespace fr::supervisor {

const StartPathImpl& standby_start_path() {
  static const PartStartPath p{StartPath::kStandby};
  return p;
}

std::unique_ptr<Part> make_standby_part(const PartHosts& h) { return std::make_unique<Standby>(h.standby, h.basics, h.gpus); }

}  // namespace fr::supervisor
