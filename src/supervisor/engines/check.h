// The answer to "would the engine start with these flags?": the {"op":"check"} reply of fastrestartd and
// `fastrestartctl check --offline`, one shape for both and for every engine kind (docs/supervisor.md,
// "Control protocol"), and the pushed flags of a check or reload request. The kind's adapter
// (engine_kind.h) does the checking; this builds the reply.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fastrestart/result.h"
#include "supervisor/config.h"
#include "supervisor/control_request.h"
#include "supervisor/engines/engine_kind.h"

namespace fr::supervisor {

// The flags a request pushes ({"flags": [...] | "...", "mode": "replace" (default) | "add" | "remove"})
// applied to `current`; without "flags", `current`. Errors are kInvalidArgument naming "<op>.flags",
// "<op>.flags[i]" or "<op>.mode".
Result<FlagList> pushed_flags(const nlohmann::json& req, const FlagList& current, const std::string& op);
// The same for a request parse_control_request has read: fastrestartd reads each request once, and this
// is where a push is merged (FlagList::merged).
FlagList pushed_flags(const ControlRequest& req, const FlagList& current);

struct CheckInput {
  const Config& config;              // engine.kind, command, env, vllm_version; weights
  const EngineAdapter& kind;         // the config's kind (with what its engines reported, if any)
  FlagList current;                  // the flags the engine runs with (offline: the file's)
  bool own_environment = false;      // fastrestartd's own environment reaches the engine (false offline)
};

// {"ok": true, "kind", "flags": next, "checked_against": {"version", "source"} or null (no rules for the
// kind), "findings": [{"severity", "subject", "message"}], "daemon_affecting": [...]} and, with `with_would`,
// "would": "refuse" | "nothing" | "restart the engine (warm)" | "reload the daemons (cold)".
nlohmann::json check_reply(const CheckInput& in, const FlagList& next, bool with_would);

}  // namespace fr::supervisor
