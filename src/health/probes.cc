#include "health/probes.h"

#include <string>
#include <vector>

#include "status/status.h"

namespace fr::health {
namespace {

using nlohmann::json;
using status::SupervisorStatus;

// The status as its codec reads it (status/status.h), or the error naming the field at fault.
Result<SupervisorStatus> decode(const json& status) { return status::supervisor_status_from_json(status); }

std::string readiness_state(const SupervisorStatus& s) {
  const std::string& state = s.state;
  if (state.empty()) return "unknown";
  if (state == "ready" || state == "stopping" || state == "stopped" || state == "failed") return state;
  if (s.reload_in_progress) return "reloading";
  if (state == "draining") return "restarting";
  return state;
}

}  // namespace

ProbeAnswer health_probe(const json& status) {
  if (!status.is_object())
    return {503, {{"status", "down"}, {"down", {"supervisor: not answering"}}}};
  auto s = decode(status);
  if (!s.ok()) return {503, {{"status", "down"}, {"down", {"supervisor: unreadable status: " + s.error().message}}}};
  std::vector<std::string> down;
  // failed: gave up after a crash loop and is on its way out; stopped: the loop has ended.
  if (s->state == "failed" || s->state == "stopped") down.push_back("supervisor: " + s->state);
  for (size_t i = 0; i < s->daemons.size(); ++i) {
    const auto& d = s->daemons[i];
    if (d.state == "ready" || d.state == "loading") continue;
    // The daemon's name as /health and the metrics show it: its gpu ("0", "host"), else its index.
    std::string what = "daemon " + (d.gpu.empty() ? std::to_string(i) : d.gpu) + ": " + (d.state.empty() ? "unknown" : d.state);
    if (!d.error.empty()) what += " (" + d.error.substr(0, 200) + ")";
    down.push_back(std::move(what));
  }
  if (down.empty()) return {200, {{"status", "ok"}}};
  return {503, {{"status", "down"}, {"down", down}}};
}

std::string readiness_state(const json& status) {
  auto s = decode(status);
  return s.ok() ? readiness_state(*s) : "unknown";
}

ProbeAnswer ready_probe(const json& status) {
  if (!status.is_object()) return {503, {{"state", "unknown"}, {"error", "the supervisor is not answering"}}};
  auto s = decode(status);
  if (!s.ok()) return {503, {{"state", "unknown"}, {"error", "unreadable status: " + s.error().message}}};
  const std::string state = readiness_state(*s);
  ProbeAnswer a{state == "ready" ? 200 : 503, {{"state", state}}};
  if (!s->status_text.empty()) a.body["status_text"] = s->status_text;
  return a;
}

}  // namespace fr::health
