// What a vLLM engine says about itself in its output, for status and metrics: its version and the model
// runner it chose (vLLM has no flag that reports the runner), vLLM's own weight-cache result (ipc_cache:
// "Mapped N tensors from the weight cache daemon" / "Weight cache unusable"), and the result line of
// fastrestart's vLLM loader plugin. Pure: lines in, fields out. Line forms: data/vllm.toml [[report]] and
// docs/vllm.md ("What the supervisor reads").
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "supervisor/engines/vllm/vllm_rules.h"

namespace fr::supervisor {

// fastrestart-loader: v=1 result=hit key=... device=... tp=r/n pp=r/n dp=r/n mode=... tensors=N bytes=N
//   attach_ms=X load_ms=X publish=... publish_ms=X total_ms=X reason="<JSON string>"   (one line)
// The form is defined by python/fastrestart_vllm (docs/vllm-plugin.md, "The result line"); `-` marks a
// field that does not apply; a format version other than 1 is not parsed.
struct LoaderResult {
  std::string result;                         // hit | miss | fallback | fail
  std::string reason;                         // decoded
  std::map<std::string, std::string> fields;  // every other field as written (key, attach_ms, ...)
};
std::optional<LoaderResult> parse_loader_line(const std::string& line);

struct VllmReport {
  struct Field {
    std::string value;
    std::string line;  // the line it came from ("" for a default)
  };
  std::map<std::string, Field> fields;       // "version", "model_runner", "weight_cache", ...
  std::vector<LoaderResult> loader;          // one per rank that loaded (the last 16)

  // Reads one output line; true when it said something.
  bool observe(const VllmRules& rules, const std::string& line);
  // At readiness: fields vLLM says nothing about when it takes its default ([[report_default]]).
  void finish(const VllmRules& rules);
  std::string get(const std::string& field) const;
  nlohmann::json to_json() const;
};

// `s` without ANSI escape sequences (vLLM colours its logo and, on a terminal, its log levels).
std::string strip_ansi(const std::string& s);

}  // namespace fr::supervisor
