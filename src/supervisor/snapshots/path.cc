// The start path "snapshot": restore an initialized engine from a CRIU artifact (docs/snapshot.md). The
// helper process does the restore; a refused or failed restore falls back to the next listed path.
#include "supervisor/start/start_path.h"

namespace fr::supervisor {

const StartPathImpl& snapshot_start_path() {
  static const PartStartPath<StartPath::kSnapshot> p;
  return p;
}

}  // namespace fr::supervisor
