#include "supervisor/engine_watch.h"

#include <algorithm>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "supervisor/private_endpoint.h"

namespace fr::supervisor {

EngineWatch::EngineWatch(Loop& loop, const Config& cfg, EngineWatchHost& host)
    : m_loop(loop), m_cfg(cfg), m_host(host), m_poll_timer(loop), m_deadline_timer(loop), m_health_timer(loop) {}

// How often readiness is polled: restart.poll_interval_s, but every 5 ms in the first 2 s after a
// standby's release, whose engine is up in a fraction of a second (docs/standby.md).
double EngineWatch::poll_interval() const {
  const double every = m_cfg.readiness.poll_interval_s;
  const Engine* e = m_host.watched_engine();
  if (e && !e->standby_level.empty() && m_loop.now_s() - e->spawned_at < 2) return std::min(every, 0.005);
  return every;
}

void EngineWatch::arm(bool poll_now) {
  m_consecutive_health_failures = 0;
  m_deadline_timer.start(m_cfg.readiness.startup_timeout_s, [this] {
    Engine* e = m_host.watched_engine();
    if (e && !e->exited) {
      spdlog::error("engine not ready after {} s: killing it", m_cfg.readiness.startup_timeout_s);
      e->killed_timeout = true;
      m_host.start_timed_out();
    }
  });
  if (poll_now) m_poll_timer.start(poll_interval(), [this] { poll_readiness(); });
}

void EngineWatch::poll_now() { m_poll_timer.start(0.0, [this] { poll_readiness(); }); }

void EngineWatch::stop_deadline() { m_deadline_timer.stop(); }

void EngineWatch::start_health() {
  m_health_timer.start(m_cfg.readiness.check_interval_s, [this] { check_health(); }, m_cfg.readiness.check_interval_s);
}

void EngineWatch::stop_health() { m_health_timer.stop(); }

void EngineWatch::stop() {
  m_poll_timer.stop();
  m_health_timer.stop();
  m_deadline_timer.stop();
}

bool EngineWatch::probe(bool full, std::function<void(ProbeResult)> on_result) {
  // Readiness probes an engine not yet ready, health one that is; neither one being stopped.
  auto wanted = [this, full] {
    const Engine* e = m_host.watched_engine();
    return e && !e->exited && !e->stop_requested && e->path.empty() == full;
  };
  if (!wanted() || m_probe_in_flight) return false;
  m_probe_in_flight = true;
  const Engine& e = *m_host.watched_engine();
  const pid_t pid = e.pid;
  // Its private endpoint when it has one: never behind the clients' requests in the public accept queue.
  const bool private_endpoint = e.probe_port != 0;
  // Otherwise where the engine serves: with engine.listen = "front", fastrestartd's loopback socket.
  auto host = private_endpoint ? std::string(kProbeHost) : engine_serve_host(m_cfg);
  auto port = private_endpoint ? e.probe_port : engine_serve_port(m_cfg);
  auto rc = m_cfg.readiness;
  if (rc.model.empty()) rc.model = m_host.readiness_model();  // vLLM: the served name, else it answers 404
  run_in_pool<ProbeResult>(
      m_loop,
      [host, port, rc, full] {
        return full ? probe_readiness(host, port, rc, std::min(rc.check_timeout_s, 30.0))
                    : probe_health(host, port, rc, rc.check_timeout_s);
      },
      [this, pid, wanted, on_result = std::move(on_result)](ProbeResult r) {
        m_probe_in_flight = false;
        if (!wanted() || m_host.watched_engine()->pid != pid) return;
        on_result(std::move(r));
      });
  return true;
}

void EngineWatch::poll_readiness() {
  const bool started = probe(true, [this](ProbeResult r) {
    if (r.ok) {
      spdlog::info("readiness passed: {} answered {}", m_cfg.readiness.request_path, nlohmann::json(r.detail).dump());
      m_host.readiness_passed();
      return;
    }
    if (r.health_ok) spdlog::info("readiness: {}", r.detail);
    m_host.still_starting();
    // A probe that waited out its timeout on the private endpoint waited in its queue: the next one goes at
    // once, so that one is always waiting there when the engine starts accepting (READY follows at once).
    const bool waiting = r.unanswered && m_host.watched_engine()->probe_port != 0;
    m_poll_timer.start(waiting ? 0.0 : poll_interval(), [this] { poll_readiness(); });
  });
  // A probe still in flight is of the engine before this one: a health check of an engine that died
  // while its connection waited in the queue of a socket fastrestartd owns, answered only once the next
  // engine accepts. Its result is dropped, so poll again, or readiness would never be looked at (the
  // start would run out its deadline and fall through to the next path).
  const Engine* e = m_host.watched_engine();
  if (!started && e && !e->exited && e->path.empty()) m_poll_timer.start(poll_interval(), [this] { poll_readiness(); });
}

void EngineWatch::check_health() {
  probe(false, [this](ProbeResult r) {
    if (r.ok) {
      m_consecutive_health_failures = 0;
      return;
    }
    ++m_consecutive_health_failures;
    spdlog::warn("health check failed ({} of {}): {}", m_consecutive_health_failures, m_cfg.readiness.hang_after_failures,
                 r.detail);
    if (m_consecutive_health_failures >= m_cfg.readiness.hang_after_failures) {
      m_host.watched_engine()->killed_hang = true;
      m_host.engine_hung();
    }
  });
}

}  // namespace fr::supervisor
