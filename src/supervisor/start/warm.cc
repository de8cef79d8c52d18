// The start path "warm": the engine attaches to the weights the daemons hold (no disk read). It can serve
// only while the daemons are up, ready and hold weights; the engine's own attach result then decides the
// path that is reported (an engine that misses loads from disk and the start is reported cold, with why).
#include "supervisor/start/start_path.h"

namespace fr::supervisor {
namespace {

class WarmPath final : public StartPathImpl {
 public:
  StartPath id() const override { return StartPath::kWarm; }
  std::optional<StartRefusal> refusal(const StartHost& host) const override { return host.daemons_refusal(); }
  Result<StartOutcome> start(StartHost& host) const override {
    FR_TRY(host.spawn_engine(StartPath::kWarm));
    return StartOutcome::kStarted;
  }
};

}  // namespace

const StartPathImpl& warm_start_path() { static const WarmPath p; return p; }

}  // namespace fr::supervisor
