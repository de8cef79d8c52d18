// The answer to "would vLLM start with these flags?": the {"op":"check"} reply of fastrestartd and
// `fastrestartctl check --offline`, one shape for both (docs/supervisor.md, "Control protocol"), and the
// pushed flags of a check or reload request. Pure: the config, the rules and the flags decide.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fastrestart/result.h"
#include "supervisor/config.h"
#include "supervisor/engines/vllm/vllm_rules.h"

namespace fr::supervisor {

// The flags a request pushes ({"flags": [...] | "...", "mode": "replace" (default) | "add" | "remove"})
// applied to `current`; without "flags", `current`. Errors are kInvalidArgument naming "<op>.flags",
// "<op>.flags[i]" or "<op>.mode".
Result<std::vector<std::string>> pushed_flags(const nlohmann::json& req, const std::vector<std::string>& current,
                                              const std::string& op);

struct CheckInput {
  const Config& config;                            // engine.kind, command, env, vllm_version; weights
  const VllmRules& rules;
  std::string reported_version;                    // what the engine said at its last start; "" offline
  std::map<std::string, std::string> inherited;    // VLLM_* of fastrestartd's environment; {} offline
  std::vector<std::string> current;                // the flags the engine runs with (offline: the file's)
};

// {"ok": true, "kind", "flags": next, "checked_against": {"version", "source"} or null (not vllm),
//  "findings": [{"severity", "subject", "message"}], "daemon_affecting": [...]} and, with `with_would`,
// "would": "refuse" | "nothing" | "restart the engine (warm)" | "reload the daemons (cold)".
nlohmann::json check_reply(const CheckInput& in, const std::vector<std::string>& next, bool with_would);

}  // namespace fr::supervisor
