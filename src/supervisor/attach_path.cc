#include "supervisor/attach_path.h"

#include <spdlog/spdlog.h>

namespace fr::supervisor {

std::string path_from_engine_report(Engine& e, Stats& stats) {
  const AttachWord w = e.report->attach_word();
  for (const auto& m : w.misses) stats.attach_miss(m);
  stats.attach(w.counted);
  if (e.miss_reason.empty()) e.miss_reason = w.miss_reason;
  return w.path;
}

std::string attach_path(AttachSeen seen, Engine& e, bool kind_reports_attach, Stats& stats) {
  // A miss by the engine decides even when an attach by it follows: an engine that loaded from disk
  // and published then adopts the daemon's copy (docs/tinyengine.md, "Loading"); its start was cold.
  if (!seen.miss.empty()) seen.hit = false;
  if (seen.hit) {
    stats.attach("hit");
  } else if (!seen.miss.empty()) {
    stats.attach_miss(seen.miss.substr(0, 80));
    e.miss_reason = "the weight daemon answered: " + seen.miss;
    stats.attach("fallback");
    spdlog::info("the engine missed the weight cache ({}) and loaded from disk", seen.miss);
  } else if (kind_reports_attach) {
    // No daemon record by its pid: the vLLM plugin's result line is the engine's own word.
    seen.hit = path_from_engine_report(e, stats) == "warm";
  } else {
    stats.attach("none");
  }
  return seen.hit ? "warm" : "cold";
}

}  // namespace fr::supervisor
