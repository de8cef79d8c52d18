// Readiness is a real request (ARCHITECTURE.md, "Readiness is a real request"): a representative completion
// (temperature 0) returns a token, which must equal the oracle when one is configured, and /health answers
// 200. Blocking: run it on the thread pool.
#pragma once

#include <string>
#include <string_view>

#include "supervisor/config.h"

namespace fr::supervisor {

struct ProbeResult {
  bool ok = false;
  bool health_ok = false;  // /health answered 200 (for liveness checks)
  std::string detail;      // why not, or the completion text
  double seconds = 0;
  // No answer within the whole timeout: the request waited (in an accept queue, or in an engine that
  // accepted but did not answer). A probe sent again at once cannot spin: each one waits its timeout.
  bool unanswered = false;
};

// POST request_path with the prompt, then GET health_path (empty request_path: health only); ok when both
// pass. `timeout_s` bounds each request.
ProbeResult probe_readiness(const std::string& host, uint16_t port, const ReadinessConfig& rc, double timeout_s);
// Judges the answer to the readiness request (HTTP status and body): ok when 200 with a JSON body whose
// choices[0].text is a string equal to the oracle, if one is configured; else `detail` says why. Pure, so
// the fuzz target (fuzz/fuzz_readiness.cc) feeds it engine answers directly.
ProbeResult judge_completion(int status, std::string_view body, const ReadinessConfig& rc);
// GET health_path only.
ProbeResult probe_health(const std::string& host, uint16_t port, const ReadinessConfig& rc, double timeout_s);

}  // namespace fr::supervisor
