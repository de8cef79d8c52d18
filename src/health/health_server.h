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
// Serving: libmicrohttpd on one internal epoll thread, so a slow or idle client costs a connection slot,
// never a worker. No client can keep a probe out (docs/health.md, "Serving and its limits"): there is no
// per-address cap (the kubelet shares its address with every process of the node), Options::connection_limit
// bounds the slots of everyone together, and a new connection beyond it closes the oldest one that is not
// being answered, so a fresh probe always gets a slot; Options::request_deadline_s bounds the time from a
// connection's accept (or its previous answer) to the end of its request, however the bytes trickle in.
// Handlers never block: a request is parked (suspended) until a status taken after it arrived is there,
// fetched by the server's own status thread. Source::status is only ever called from that thread, one call
// at a time; it may block (the supervisor's loop being busy), and a request that waits longer than
// Options::answer_deadline_s is answered from the last status if it is younger than Options::max_age_s,
// else /health and /ready say 503 "supervisor: not answering".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace fr::health {

struct Options {
  // Connections held at once, all clients together. A new connection beyond it closes the oldest one that is
  // not being answered (one waiting for its request's bytes, or idle between keep-alive requests).
  unsigned connection_limit = 256;
  // Longest a connection may take from its accept, or from its previous answer on a keep-alive connection, to
  // a complete request and its answer; not reset by each byte received. Past it the connection is closed.
  double request_deadline_s = 5;
  double answer_deadline_s = 1;  // longest a request waits for a fresh status
  double max_age_s = 10;         // a status older than this is not served after the deadline
};

struct Source {
  // Returns the same JSON as `fastrestartctl status --json` (Supervisor::status_json()). Called from the
  // server's status thread only. May throw or return null when the supervisor cannot answer; the server
  // turns that into a 503.
  std::function<nlohmann::json()> status;
};

class HealthServer {
 public:
  // Binds `listen` ("host:port", "[v6addr]:port"; port 0 picks an ephemeral port) and starts serving
  // before returning. "none" (listener off) is the caller's business and is an error here.
  // Errors: kInvalidArgument for an address that does not parse (the message quotes it); kIo when it cannot
  // be resolved or bound (the message names the address and why).
  static fr::Result<std::unique_ptr<HealthServer>> start(const std::string& listen, Source source,
                                                         Options options = {});

  // The bound port (the ephemeral one when started with port 0).
  uint16_t port() const;

  // Stops accepting, answers parked requests (503), closes every connection and joins every thread it
  // started; waits for a Source::status call in progress to return.
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
