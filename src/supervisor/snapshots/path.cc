// The start path "snapshot": restore an initialized engine from a CRIU artifact (docs/snapshot.md). The
// helper process does the restore; a refused or failed restore falls back to the next listed path.
#include "supervisor/start/start_path.h"

namespace fr::supervisor {
namespace {

class SnapshotPath final : public StartPathImpl {
 public:
  StartPath id() const override { return StartPath::kSnapshot; }
  std::optional<StartRefusal> refusal(const StartHost& host) const override { return part_refusal(host, id()); }
  Result<StartOutcome> start(StartHost& host) const override { return start_part(host, id()); }
};

}  // namespace

const StartPathImpl& snapshot_start_path() {
  static const SnapshotPath p;
  return p;
}

}  // namespace fr::supervisor
