// HealthServer: fastrestartd's HTTP listener for probes, Prometheus and live status (docs/health.md).
//
// Endpoints (all GET; anything else is a 404 with a JSON body):
//   /health   200 {"status":"ok"} while the supervisor answers and every weight daemon is "ready" or
//             "loading"; else 503 {"status":"down","down":[...]} naming what is down. Never looks at the
//             engine: it is the liveness probe.
//   /ready    200 {"state":"ready"} only while status["state"] == "ready"; else 503 {"state": S} with S one of
//             loading, starting, restarting (draining), backoff, held, reloading, stopping, failed, stopped.
//   /status   the status JSON, exactly what `fastrestartctl status --json` prints.
//   /metrics  Prometheus text exposition format 0.0.4 (render_metrics).
//
// Threading: the server runs its own accept thread and a small worker pool; Source::status is called from
// those workers, concurrently, and must be thread-safe. A status callback that throws or returns null makes
// /health and /ready answer 503 (the supervisor loop is not answering), so a Source that posts to the
// supervisor's loop should give up after a short timeout rather than block.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace fr::health {

struct Source {
  // Returns the same JSON as `fastrestartctl status --json` (Supervisor::status_json()). Thread-safe.
  // May throw or return null when the supervisor cannot answer; the server turns that into a 503.
  std::function<nlohmann::json()> status;
};

class HealthServer {
 public:
  // Binds `listen` ("host:port", "[v6addr]:port"; port 0 picks an ephemeral port) and starts serving
  // before returning. "none" (listener off) is the caller's business and is an error here.
  // Errors: kInvalidArgument for an address that does not parse (the message quotes it); kIo when it cannot
  // be resolved or bound (the message names the address and why).
  static fr::Result<std::unique_ptr<HealthServer>> start(const std::string& listen, Source source);

  // The bound port (the ephemeral one when started with port 0).
  uint16_t port() const;

  // Stops accepting, finishes in-flight requests and joins every thread it started.
  ~HealthServer();

  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

 private:
  struct Impl;
  explicit HealthServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

// The /metrics body for a status JSON, in Prometheus text format 0.0.4. Every family has HELP and TYPE and
// appears once; missing or mistyped fields are treated as absent (families without data keep their
// HELP/TYPE lines and no samples). Never throws on any JSON value.
std::string render_metrics(const nlohmann::json& status, const std::string& version);

}  // namespace fr::health
