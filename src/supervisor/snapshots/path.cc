// The start path "snapshot": restore an initialized engine from a CRIU artifact (docs/snapshot.md). The
// helper process does the restore; a refused or failed restore falls back to the next listed path. Its
// part, the Snapshots, holds the artifact and the restore.
#include "supervisor/snapshots/snapshots.h"
#include "supervisor/start/paths.h"

namespace fr::supervisor {

const StartPathImpl& snapshot_start_path() {
  static const PartStartPath p{StartPath::kSnapshot};
  return p;
}

std::unique_ptr<Part> make_snapshots_part(const PartHosts& h) {
  return std::make_unique<Snapshots>(h.snapshots, h.restore, h.basics, h.stats);
}

}  // namespace fr::supervisor
