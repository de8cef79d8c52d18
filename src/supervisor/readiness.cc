#include "supervisor/readiness.h"

#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "common/bounded_json.h"

namespace fr::supervisor {
namespace {

httplib::Client make_client(const std::string& host, uint16_t port, double timeout_s) {
  httplib::Client c(host, port);
  auto sec = static_cast<time_t>(timeout_s);
  auto usec = static_cast<time_t>((timeout_s - static_cast<double>(sec)) * 1e6);
  c.set_connection_timeout(sec, usec);
  c.set_read_timeout(sec, usec);
  c.set_write_timeout(sec, usec);
  c.set_keep_alive(false);
  return c;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

ProbeResult probe_health(const std::string& host, uint16_t port, const ReadinessConfig& rc, double timeout_s) {
  auto t0 = std::chrono::steady_clock::now();
  ProbeResult r;
  auto c = make_client(host, port, timeout_s);
  auto res = c.Get(rc.health_path);
  r.seconds = since(t0);
  if (!res) {
    r.detail = "GET " + rc.health_path + ": " + httplib::to_string(res.error());
    r.unanswered = r.seconds >= 0.9 * timeout_s;
    return r;
  }
  if (res->status != 200) {
    r.detail = "GET " + rc.health_path + ": HTTP " + std::to_string(res->status);
    return r;
  }
  r.ok = r.health_ok = true;
  return r;
}

// The completion goes first and /health after it: on a private endpoint the completion is already waiting
// in the queue when the engine starts accepting, so it joins the engine's first batch, and READY follows the
// first request the engine can answer by one /health round trip. Sent after /health (a round trip later) it
// could miss that batch and wait a whole request (ARCHITECTURE.md, "Readiness is a real request").
ProbeResult probe_readiness(const std::string& host, uint16_t port, const ReadinessConfig& rc, double timeout_s) {
  if (rc.request_path.empty()) return probe_health(host, port, rc, timeout_s);
  auto t0 = std::chrono::steady_clock::now();
  nlohmann::json body{{"prompt", rc.prompt}, {"max_tokens", rc.max_tokens}, {"temperature", 0}};
  if (!rc.model.empty()) body["model"] = rc.model;
  auto c = make_client(host, port, timeout_s);
  auto res = c.Post(rc.request_path, body.dump(), "application/json");
  if (!res) {
    ProbeResult r;
    r.seconds = since(t0);
    r.detail = "POST " + rc.request_path + ": " + httplib::to_string(res.error());
    r.unanswered = r.seconds >= 0.9 * timeout_s;
    return r;
  }
  ProbeResult r = judge_completion(res->status, res->body, rc);
  // /health as well: an engine whose completion passes but whose health check fails is not ready (vLLM's
  // /health reports its engine core), and health_ok tells a loading engine from a dead one in the logs.
  ProbeResult health = probe_health(host, port, rc, timeout_s);
  r.health_ok = health.ok;
  if (r.ok && !health.ok) {
    r.ok = false;
    r.detail = health.detail;
  }
  r.seconds = since(t0);
  return r;
}

ProbeResult judge_completion(int status, std::string_view body, const ReadinessConfig& rc) {
  ProbeResult r;
  if (status != 200) {
    // The engine's words, quoted and escaped: one line of valid UTF-8 in logs and in the status JSON.
    r.detail = "POST " + rc.request_path + ": HTTP " + std::to_string(status) + " " +
               nlohmann::json(std::string(body.substr(0, 200))).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return r;
  }
  auto j = parse_json_or_discarded(body, kSmallJsonLimits);
  const nlohmann::json* text = nullptr;
  if (!j.is_discarded() && j.is_object() && j.contains("choices") && j["choices"].is_array() && !j["choices"].empty() &&
      j["choices"][0].is_object() && j["choices"][0].contains("text") && j["choices"][0]["text"].is_string())
    text = &j["choices"][0]["text"];
  if (!text) {
    r.detail = "POST " + rc.request_path + ": the answer has no choices[0].text";
    return r;
  }
  r.detail = text->get<std::string>();
  if (rc.expect_text && *rc.expect_text != r.detail) {
    r.detail = "the readiness answer " + nlohmann::json(r.detail).dump() + " differs from the oracle " +
               nlohmann::json(*rc.expect_text).dump();
    return r;
  }
  r.ok = true;
  return r;
}

}  // namespace fr::supervisor
