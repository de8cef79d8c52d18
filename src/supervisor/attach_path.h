// Which path a start took, warm or cold, once its engine is ready: the weight daemons' records of its
// attach (attach_seen.h), else the engine's own word (its kind's report, engines/engine_kind.h). Each
// answer is counted in status's attaches and misses (stats.h). On the loop thread; no I/O.
#pragma once

#include <string>

#include "supervisor/attach_seen.h"
#include "supervisor/engine.h"
#include "supervisor/stats.h"

namespace fr::supervisor {

// The engine's own word: "warm" | "cold" | "" (it said nothing); a miss it names becomes its miss_reason.
std::string path_from_engine_report(Engine& e, Stats& stats);

// "warm" or "cold" from the daemons' records by the engine's pid (`seen`). A miss by the engine decides
// even when an attach by it follows; without any record, the engine's own word decides when its kind
// reports its attach (`kind_reports_attach`), else the start was cold.
std::string attach_path(AttachSeen seen, Engine& e, bool kind_reports_attach, Stats& stats);

}  // namespace fr::supervisor
