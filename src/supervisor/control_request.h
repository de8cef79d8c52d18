// Validation of control-socket requests (docs/supervisor.md, "Control protocol") before the supervisor
// acts on them. Pure: no I/O, no state. Everything a peer sends reaches the handler only through here, so
// a wrong type ({"op":5}, {"wait":"yes"}) is an error reply naming the field, never an exception on the
// loop thread.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fastrestart/result.h"
#include "supervisor/flags.h"

namespace fr::supervisor {

struct ControlRequest {
  std::string op;                                 // any string: the handler answers unknown ops itself
  std::optional<FlagList> flags;                  // reload, check: the pushed flags (a string is split like sh)
  PushKind mode = PushKind::kReplace;
  bool wait = true;
};

// Checks the known fields' types and values: `op` (string, at most 64 bytes), `flags` (string or array
// of strings), `mode` ("replace" | "add" | "remove"), `wait` (boolean). Unknown fields are ignored (newer
// clients). Errors: Errc::kInvalidArgument, message "<field>: <what>".
Result<ControlRequest> parse_control_request(const nlohmann::json& req);

// The request as a client sends it (flags always as an array); parse_control_request gives it back.
nlohmann::json to_json(const ControlRequest& r);

}  // namespace fr::supervisor
