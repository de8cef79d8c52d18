// The identity a snapshot needs to be restored safely (docs/snapshot.md, "Identity").
//
// A snapshot is process memory: it is only valid on the same kernel, CRIU, driver and GPU, for the same
// engine binary, arguments, environment and weights. The manifest records the identity at creation; a
// restore collects it again and refuses, before CRIU runs, when any field differs, naming that field.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/file_identity.h"
#include "fastrestart/result.h"

namespace fr::snapshot {

// What fastrestartd knows about the engine from its config; the helper gets it as JSON (spec.json).
struct EngineSpec {
  std::vector<std::string> argv;              // argv[0] resolved to a path
  std::map<std::string, std::string> env;     // the variables fastrestartd sets (not its inherited ones)
  std::vector<std::string> files;             // the checkpoint files (weights.checkpoint, expanded)
  std::string host = "127.0.0.1";
  int port = 0;
  std::string prompt = "The capital of France is";
  std::string model;                          // "model" field of the oracle request; empty: omitted
  int oracle_tokens = 4;
  // Secrets (common/secrets.h): the config's extra secret flag names, and the variables of `env` whose
  // values are not secret. The identity records every other value of `env`, and the values of secret
  // flags, as their digest (hide_secrets). Absent in older specs: none.
  std::vector<std::string> secret_flags;
  std::vector<std::string> public_env;
};

struct GpuIdentity {
  std::string driver_version;  // cuDriverGetVersion, e.g. "13000"
  std::string uuid;            // GPU-xxxxxxxx-...
  std::string name;
};

struct Identity {
  std::string kernel_release;  // uname -r
  std::string criu_version;
  bool cuda = false;           // the engine held a CUDA context at creation
  GpuIdentity gpu;             // only when cuda
  std::string executable;      // the engine's argv[0], resolved
  std::string executable_hash; // XXH64 of its bytes (hex)
  std::vector<FileIdentity> files;
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  // XXH64 of every regular file of at most kMaxArgFileBytes that an argument names by absolute path (as
  // itself or as the value of --flag=PATH), the checkpoint files excepted: an interpreted engine's script
  // and its config files are as much the engine as the executable (python3 is the same binary for every
  // script). Absent in manifests written before it existed: read as none.
  std::map<std::string, std::string> arg_hashes;  // path -> hex
};

inline constexpr uint64_t kMaxArgFileBytes = 64ull << 20;

nlohmann::json to_json(const EngineSpec& s);
// Errors name the field: "spec.port: expected an integer".
Result<EngineSpec> spec_from_json(const nlohmann::json& j, const std::string& where);

nlohmann::json to_json(const Identity& id);
Result<Identity> identity_from_json(const nlohmann::json& j, const std::string& where);

// XXH64 of a whole file, streamed (the engine binary: tens of MB at most).
Result<std::string> hash_file(const std::string& path);

// Everything but the GPU fields and cuda, which the caller fills (only the helper may touch CUDA).
Result<Identity> collect_identity(const EngineSpec& spec, const std::string& criu_version);

// Secret values of args and env replaced by their digest (fr::secret_digest, "<secret xxh64:...>"):
// still compared, never written in clear to the manifest nor shown in a difference. Every env value is
// secret but those of `public_env`; args by the rule of common/secrets.h and `secret_flags`. Digests
// already there stay (a manifest read back).
void hide_secrets(Identity& id, const std::vector<std::string>& secret_flags, const std::vector<std::string>& public_env);

// The first field that differs, as "identity.kernel_release: recorded \"6.1\", now \"6.18\"", or nullopt.
// Both sides are compared with their secrets hidden (hide_secrets with the spec's lists): a rotated
// --api-key shows as two digests, never as the keys (a manifest written before hide_secrets holds them).
std::optional<std::string> first_difference(const Identity& recorded, const Identity& now,
                                            const std::vector<std::string>& secret_flags = {},
                                            const std::vector<std::string>& public_env = {});

}  // namespace fr::snapshot
