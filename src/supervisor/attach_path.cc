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

void decide_ready_path(Loop& loop, Engine& e, const ReadyPathFacts& facts, Stats& stats,
                       std::function<Engine*()> current, std::function<void(std::string)> done) {
  if (!e.snapshot_id.empty()) return done("snapshot");
  if (!e.standby_level.empty()) return done("standby");
  e.report->finish();  // what the engine says nothing about
  if (facts.engine_report_decides || (facts.kind_reports_attach && !facts.loader_protocol)) {
    // vLLM's own words decide: "Mapped N tensors from the weight cache daemon" / the loader's result line.
    return done(path_from_engine_report(e, stats) == "warm" ? "warm" : "cold");
  }
  if (!facts.loader_protocol) return done("cold");
  // Did the engine really attach? The daemons' records by its pid say (attach_seen.h).
  const pid_t pgid = e.pid;
  const double since = e.attach_since_unix - 1;
  run_in_pool<AttachSeen>(
      loop, [socks = facts.attach_sockets, pgid, since] { return attach_seen(socks, pgid, since); },
      [pgid, kind_reports = facts.kind_reports_attach, &stats, current = std::move(current), done = std::move(done)](AttachSeen seen) {
        // Applied to the next engine, the answer would mark an engine ready that was never probed, which
        // then dies at the start deadline (ARCHITECTURE.md, "Readiness is a real request").
        Engine* now = current();
        if (!now || now->pid != pgid || now->exited || now->stop_requested) {
          spdlog::info("engine pid {} is gone or stopping: its attach result is dropped", pgid);
          return;
        }
        done(attach_path(std::move(seen), *now, kind_reports, stats));
      });
}

}  // namespace fr::supervisor
