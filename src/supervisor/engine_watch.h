// The checks fastrestartd runs on its engine (ARCHITECTURE.md, "Readiness is a real request";
// docs/supervisor.md): the readiness polls and the start deadline of an engine not yet ready, then the
// health checks of one that is. On the loop thread; each probe runs on the thread pool (readiness.h).
// It keeps no engine of its own: it asks its host for the current one at every step, and drops a probe's
// answer about an engine that is no longer the current one, is stopping or exited.
#pragma once

#include <functional>
#include <string>

#include "supervisor/config.h"
#include "supervisor/engine.h"
#include "supervisor/loop.h"
#include "supervisor/readiness.h"

namespace fr::supervisor {

// What the watch asks and tells (the Supervisor; the events go through its lifecycle table).
class EngineWatchHost {
 public:
  virtual ~EngineWatchHost() = default;
  virtual Engine* watched_engine() = 0;             // the current engine, or nullptr
  virtual std::string readiness_model() const = 0;  // the model a readiness request names when readiness.model is ""
  virtual void readiness_passed() = 0;
  virtual void still_starting() = 0;  // a readiness probe failed while the engine lives: it is making its way
  // Not ready within readiness.startup_timeout_s / hang_after_failures health checks failed in a row: the
  // watch has marked the engine (killed_timeout / killed_hang) before it calls these.
  virtual void start_timed_out() = 0;
  virtual void engine_hung() = 0;
};

class EngineWatch {
 public:
  // `loop`, `cfg` and `host` outlive the watch; it is destroyed before the loop.
  EngineWatch(Loop& loop, const Config& cfg, EngineWatchHost& host);

  // A new engine: its start deadline from now, health failures counted from zero, and (poll_now) its
  // readiness polls from now (a restore polls once its pid is known: poll_now()).
  void arm(bool poll_now);
  void poll_now();
  void stop_deadline();  // readiness passed, or the engine was not started after all
  void start_health();   // every readiness.check_interval_s
  void stop_health();    // a dump stops the engine for a while
  void stop();           // all of it: the engine stops or exited

 private:
  void poll_readiness();
  void check_health();
  // Runs a readiness (full) or health probe of the current engine on the thread pool; `on_result` runs on
  // the loop only if that engine is still the current one and still wants that probe. False when no probe
  // was started: none is wanted, or one is still in flight (possibly of an engine before this one).
  bool probe(bool full, std::function<void(ProbeResult)> on_result);
  double poll_interval() const;

  Loop& m_loop;
  const Config& m_cfg;
  EngineWatchHost& m_host;
  Timer m_poll_timer, m_deadline_timer, m_health_timer;
  int m_consecutive_health_failures = 0;
  bool m_probe_in_flight = false;
};

}  // namespace fr::supervisor
