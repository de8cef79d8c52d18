// The start path "standby": open the gate of a standby engine that did its slow, GPU-free work (and, at
// level warmed, its attach and warm-up) in advance (docs/standby.md). It can serve only while a standby
// is parked on the current flags; a release that fails falls back to the next listed path.
#include "supervisor/start/start_path.h"

namespace fr::supervisor {
namespace {

class StandbyPath final : public StartPathImpl {
 public:
  StartPath id() const override { return StartPath::kStandby; }
  std::optional<StartRefusal> refusal(const StartHost& host) const override { return part_refusal(host, id()); }
  Result<StartOutcome> start(StartHost& host) const override { return start_part(host, id()); }
};

}  // namespace

const StartPathImpl& standby_start_path() {
  static const StandbyPath p;
  return p;
}

}  // namespace fr::supervisor
