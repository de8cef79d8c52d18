// Which path a start took, warm or cold, once its engine is ready: the weight daemons' records of its
// attach (attach_seen.h), else the engine's own word (its kind's report, engines/engine_kind.h). Each
// answer is counted in status's attaches and misses (stats.h). On the loop thread; the daemons' records
// are read on the loop's thread pool (decide_ready_path).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "supervisor/attach_seen.h"
#include "supervisor/engine.h"
#include "supervisor/loop.h"
#include "supervisor/stats.h"

namespace fr::supervisor {

// The engine's own word: "warm" | "cold" | "" (it said nothing); a miss it names becomes its miss_reason.
std::string path_from_engine_report(Engine& e, Stats& stats);

// "warm" or "cold" from the daemons' records by the engine's pid (`seen`). A miss by the engine decides
// even when an attach by it follows; without any record, the engine's own word decides when its kind
// reports its attach (`kind_reports_attach`), else the start was cold.
std::string attach_path(AttachSeen seen, Engine& e, bool kind_reports_attach, Stats& stats);

// What decides a ready start's path besides the engine: the daemon set's and the engine kind's answers.
struct ReadyPathFacts {
  bool engine_report_decides = false;  // the daemons leave it to the engine's word (DaemonSet)
  bool loader_protocol = false;        // the daemons keep records of attaches by pid (DaemonSet)
  bool kind_reports_attach = false;    // the engine kind's report names its attach (EngineAdapter)
  std::vector<std::string> attach_sockets{};  // the daemons to ask (DaemonSet::attach_sockets)
};

// The path a ready engine took, given to `done`: "snapshot" (restored), "standby" (released), else "warm"
// or "cold" from the engine's own word or the daemons' records by its pid. `done` runs at once, or on the
// loop once the daemons answered (a blocking query, run in the pool). The query may outlive its engine (a
// daemon slow to answer holds it for up to its call timeout, while the engine is restarted): its answer is
// then dropped, never applied to the next engine. `current` gives the engine of now (nullptr: none).
void decide_ready_path(Loop& loop, Engine& e, const ReadyPathFacts& facts, Stats& stats,
                       std::function<Engine*()> current, std::function<void(std::string)> done);

}  // namespace fr::supervisor
