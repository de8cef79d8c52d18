// The start path "example": the engine starts and loads as a cold start would, but the weight daemons are
// never reloaded first (the path "cold" reloads daemons that hold an earlier engine's weights). It can
// always serve. It has no state of its own, so its part is `no_part`.
#include "supervisor/start/paths.h"

namespace fr::supervisor {
namespace {

class ExamplePath final : public StartPathImpl {
 public:
  StartPath id() const override { return StartPath("example"); }
  std::optional<StartRefusal> refusal(const StartHost&) const override { return std::nullopt; }
  Result<StartOutcome> start(StartHost& host) const override {
    FR_TRY(host.spawn_engine(StartPath::kCold));
    return StartOutcome::kStarted;
  }
};

}  // namespace

const StartPathImpl& example_start_path() {
  static const ExamplePath p;
  return p;
}

}  // namespace fr::supervisor
