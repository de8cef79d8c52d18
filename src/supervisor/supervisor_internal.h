// Private to the Supervisor's .cc files: the record of a pending reload (and, through engine.h, the engine's).
#pragma once

#include <deque>
#include <future>
#include <memory>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/file_identity.h"
#include "protocol/daemon_status.h"
#include "supervisor/checkpoint_files.h"
#include "supervisor/state_files.h"
#include "supervisor/loop.h"
#include "supervisor/policy.h"
#include "supervisor/engine.h"
#include "supervisor/supervised_child.h"
#include "supervisor/supervisor.h"
#include "supervisor/engines/engine_kind.h"

namespace fr::supervisor {

struct Supervisor::PendingReload {
  FlagList new_flags, old_flags;
  bool cold = false;
  double started = 0;
  bool rolled_back = false;
  bool unpersisted = false;  // rolled back because the new flags could not be written to flags.json
  std::string rollback_reason;
  std::vector<std::shared_ptr<std::promise<nlohmann::json>>> waiters;
};

}  // namespace fr::supervisor
