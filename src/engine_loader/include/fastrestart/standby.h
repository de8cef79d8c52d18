// standby: the engine's side of the standby gate protocol (docs/standby.md, "The gate protocol").
//
// Contract
// - fastrestartd starts a standby engine with FASTRESTART_STANDBY_FD (an inherited Unix stream socket) and
//   FASTRESTART_STANDBY_LEVEL ("pre_gpu" | "warmed"). A process without FASTRESTART_STANDBY_FD (or with it
//   empty) is not a standby: every gate passes at once.
// - An engine calls standby_gate("pre_gpu") before it initializes CUDA and standby_gate("warmed") after its
//   warm-up forward, before it binds its port. Only the gate of the configured level parks.
// - Parking writes {"op":"parked","v":1,"level":...,"pid":...} and blocks until fastrestartd answers:
//   `release`: the fd is closed, both variables are removed from the environment (children started later
//   are not standbys) and the gate returns kReleased; `exit`, end of file, or a peer gone before the parked
//   line could be written: the process calls _exit(0) and the gate NEVER RETURNS.
// - Errors (nothing is exited): an invalid `level` argument (Errc::kInvalidArgument); a variable with a bad
//   value (not a number, not an open socket, an unknown level; Errc::kInvalidArgument naming the variable
//   and its value); a reply over 4096 bytes, not JSON, not an object or with an unknown op (Errc::kProtocol
//   naming the message); an I/O failure (Errc::kIo).
// - Signals: EINTR is retried, so a caught signal does not end the wait; a signal whose disposition ends
//   the process (SIGTERM by default) ends it. Not thread-safe with other users of the environment.
#pragma once

#include <string_view>

#include "fastrestart/engine_loader.h"  // Result, Error, Errc

namespace fastrestart {

inline constexpr const char* kStandbyFdEnv = "FASTRESTART_STANDBY_FD";
inline constexpr const char* kStandbyLevelEnv = "FASTRESTART_STANDBY_LEVEL";

enum class GateResult { kPassed, kReleased };

// The gate at `level` ("pre_gpu" | "warmed"): kPassed at once when this process is not a standby or waits
// at another level; kReleased after fastrestartd released it. Exits the process (never returns) when told
// to exit or when fastrestartd is gone.
Result<GateResult> standby_gate(std::string_view level);

// True when this process was started as a standby (FASTRESTART_STANDBY_FD is set and not empty) and has
// not been released yet.
bool is_standby();

}  // namespace fastrestart
