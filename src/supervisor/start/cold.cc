// The start path "cold": nothing held from before the start is reused. When the daemons hold weights an
// earlier engine loaded or used, they are reloaded first (a fresh cache, or none without a preload);
// then the engine starts and loads from disk (or from what the fresh daemons preloaded). It can always serve.
#include "supervisor/start/start_path.h"

namespace fr::supervisor {
namespace {

class ColdPath final : public StartPathImpl {
 public:
  StartPath id() const override { return StartPath::kCold; }
  std::optional<StartRefusal> refusal(const StartHost&) const override { return std::nullopt; }
  Result<StartOutcome> start(StartHost& host) const override {
    if (host.daemons_hold_old_weights()) {
      host.reload_daemons_for_start();
      return StartOutcome::kWaiting;
    }
    FR_TRY(host.spawn_engine(StartPath::kCold));
    return StartOutcome::kStarted;
  }
};

}  // namespace

const StartPathImpl& cold_start_path() { static const ColdPath p; return p; }

}  // namespace fr::supervisor
