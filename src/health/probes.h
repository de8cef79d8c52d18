// The decisions behind /health and /ready, as pure functions of the status JSON (docs/health.md), read
// through the status codec (status/status.h): a status that does not decode is down, naming the field.
// Kept apart from the HTTP server so tests can drive them with canned status objects.
#pragma once

#include <nlohmann/json.hpp>

namespace fr::health {

struct ProbeAnswer {
  int code = 503;       // HTTP status: 200 or 503
  nlohmann::json body;  // the JSON body
};

// /health: 200 while the supervisor answers and every daemon is "ready" or "loading"; a supervisor in
// "failed" or "stopped" counts as down. `status` null or not an object means the supervisor did not answer.
ProbeAnswer health_probe(const nlohmann::json& status);

// /ready: 200 only in state "ready"; otherwise 503 with the state as an operator reads it.
ProbeAnswer ready_probe(const nlohmann::json& status);

// The state /ready reports: "draining" -> "restarting", "reloading" while a reload is in progress (unless
// stopping, stopped or failed), "unknown" when the status has no state.
std::string readiness_state(const nlohmann::json& status);

}  // namespace fr::health
