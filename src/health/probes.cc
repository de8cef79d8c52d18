#include "health/probes.h"

#include <string>
#include <vector>

namespace fr::health {
namespace {

using nlohmann::json;

// A string field, or "" when absent or not a string.
std::string str(const json& j, const char* key) {
  if (!j.is_object()) return {};
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The daemon's name as /health and the metrics show it: its gpu ("0", "host"), else its index.
std::string daemon_name(const json& d, size_t index) {
  if (d.is_object()) {
    auto it = d.find("gpu");
    if (it != d.end() && it->is_string()) return it->get<std::string>();
    if (it != d.end() && it->is_number()) return it->dump();
  }
  return std::to_string(index);
}

}  // namespace

ProbeAnswer health_probe(const json& status) {
  if (!status.is_object())
    return {503, {{"status", "down"}, {"down", {"supervisor: not answering"}}}};
  std::vector<std::string> down;
  const std::string state = str(status, "state");
  // failed: gave up after a crash loop and is on its way out; stopped: the loop has ended.
  if (state == "failed" || state == "stopped") down.push_back("supervisor: " + state);
  auto daemons = status.find("daemons");
  if (daemons != status.end() && daemons->is_array()) {
    size_t i = 0;
    for (const auto& d : *daemons) {
      const std::string s = str(d, "state");
      if (s != "ready" && s != "loading") {
        std::string what = "daemon " + daemon_name(d, i) + ": " + (s.empty() ? "unknown" : s);
        const std::string err = str(d, "error");
        if (!err.empty()) what += " (" + err.substr(0, 200) + ")";
        down.push_back(std::move(what));
      }
      ++i;
    }
  }
  if (down.empty()) return {200, {{"status", "ok"}}};
  return {503, {{"status", "down"}, {"down", down}}};
}

std::string readiness_state(const json& status) {
  std::string state = str(status, "state");
  if (state.empty()) return "unknown";
  if (state == "ready" || state == "stopping" || state == "stopped" || state == "failed") return state;
  auto reload = status.find("reload_in_progress");
  if (reload != status.end() && reload->is_boolean() && reload->get<bool>()) return "reloading";
  if (state == "draining") return "restarting";
  return state;
}

ProbeAnswer ready_probe(const json& status) {
  if (!status.is_object()) return {503, {{"state", "unknown"}, {"error", "the supervisor is not answering"}}};
  const std::string state = readiness_state(status);
  ProbeAnswer a{state == "ready" ? 200 : 503, {{"state", state}}};
  const std::string text = str(status, "status_text");
  if (!text.empty()) a.body["status_text"] = text;
  return a;
}

}  // namespace fr::health
