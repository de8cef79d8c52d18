// The supervisor's side of the gate protocol's messages (docs/standby.md, "The gate protocol"): one JSON
// object per line, at most kMaxGateLine bytes with the newline.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "fastrestart/result.h"

namespace fr::supervisor {

inline constexpr size_t kMaxGateLine = 4096;
inline constexpr int kGateVersion = 1;

struct ParkedMessage {
  std::string level;  // pre_gpu | warmed
  pid_t pid = 0;      // as the engine sees itself (in its own PID namespace, possibly 1)
};

// Parses a line the engine wrote (without its newline). Errors (Errc::kProtocol) name the message: not
// JSON, not an object, an unknown op, a missing or mistyped field, another protocol version, a line
// beyond kMaxGateLine.
Result<ParkedMessage> parse_gate_message(std::string_view line);

// The answers, each with its newline.
std::string gate_release_line();
std::string gate_exit_line();

}  // namespace fr::supervisor
