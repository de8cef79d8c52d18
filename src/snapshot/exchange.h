// The helper's side of snapshots without the weights (docs/snapshot.md, "Snapshots without the weights"):
// the prepare/resume exchange with the engine, the check that the engine really released the daemon's
// pools before anything is checkpointed, and the check that a weight daemon holds what a restore needs.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <string>

#include "fastrestart/result.h"

namespace fr::snapshot {

// The exchange socket and the weights mode fastrestartd gave the engine (its environment in the spec).
inline constexpr const char* kExchangeEnv = "FASTRESTART_SNAPSHOT_SOCKET";
inline constexpr const char* kWeightsModeEnv = "FASTRESTART_WEIGHTS_MODE";

// One request line {"op": op} on `socket`, one reply line. An error when the engine does not answer (the
// message names the socket) or answers {"ok": false} (with its reason).
Result<nlohmann::json> exchange(const std::string& socket, const std::string& op, double timeout_s);

// Fails, naming the mapping, when `pid` still maps or holds open a weight pool or KV arena: a memfd of the
// host daemon ("/memfd:fastrestart-pool", which arenas share) anywhere in its maps or descriptors, or
// anything but an inaccessible reservation at a released host range; for CUDA the engine's answer must say
// unmapped (device mappings are not visible in /proc). `released` and `arenas` are the prepare reply's
// "weights" and "arenas" (docs/snapshot.md, "Snapshots without the KV cache").
Status verify_released(pid_t pid, const nlohmann::json& released, const nlohmann::json& arenas = nlohmann::json::array());

// Whether the daemon at entry["daemon_socket"] holds entry["fingerprint"] ready with entry["digest"]; the
// error says what it holds instead (or why it cannot be asked).
Status daemon_holds(const nlohmann::json& entry, double timeout_s);

}  // namespace fr::snapshot
