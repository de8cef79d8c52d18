// The artifact of one snapshot (docs/snapshot.md, "Artifact"):
//
//   <snapshot dir>/            0700, ours, never a symlink (ensure_private_dir)
//     <id>/                    0700; appears by rename(2) only once complete
//       manifest.json          0600: format, identity, oracle, sizes, timings
//       images/                CRIU's image files (process memory: secrets included)
//       restore.lock           flock while a restore runs: never two restores of one artifact at once
//     .creating-<id>/          a creation in progress (removed on failure)
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "fastrestart/result.h"
#include "snapshot/identity.h"
#include "snapshot/oracle.h"

namespace fr::snapshot {

inline constexpr int kManifestFormat = 1;

struct Manifest {
  int format = kManifestFormat;
  std::string id;
  std::string fastrestart_version;
  double created_unix = 0;
  double create_s = 0;          // request to artifact committed (engine downtime excluded)
  uint64_t image_bytes = 0;     // bytes under images/
  std::string stdout_pipe;      // "pipe:[inode]": the engine's stdout/stderr, re-plugged on restore
  // "socket:[inode]" of fastrestartd's listening socket (engine.listen = "supervisor") as the engine held it
  // at the dump, or "": the images were rewritten to take it from --inherit-fd (listen_image.h), so a
  // restore needs fastrestartd's socket, and an artifact without it cannot be restored where the port is
  // fastrestartd's.
  std::string listen_socket;
  std::string host;             // where the engine serves
  int port = 0;
  Identity identity;
  Oracle oracle;
  // Snapshots without the weights (docs/snapshot.md): null for an engine that takes no part in the exchange,
  // else {"excluded": bool, "exchange": "<engine's socket>", "entries": [{"fingerprint", "digest", "device",
  // "daemon_socket", "key" (file identities and config), "base", "bytes", "mapped": false}]}: the weights the
  // engine released before the dump, which the restore must find in the daemon and re-attach; "arenas":
  // [{"name", "device", "daemon_socket", "base", "bytes", "mapped": false}], the KV arenas it unmapped,
  // which the resume leases again (a daemon that lost one makes a new one).
  nlohmann::json weights = nullptr;
  nlohmann::json timings = nlohmann::json::object();  // cuda_lock_s, cuda_checkpoint_s, criu_dump_s, ...
};

nlohmann::json to_json(const Manifest& m);
// Errors name the field: "<dir>/manifest.json: manifest.identity.args: expected an array of strings".
Result<Manifest> manifest_from_json(const nlohmann::json& j, const std::string& where);

// Writes <dir>/manifest.json atomically (temporary file, fsync, rename), mode 0600.
Status write_manifest(const std::string& dir, const Manifest& m);
// Reads <dir>/manifest.json: manifest_from_text of its text. Errc::kCorrupt naming the file.
Result<Manifest> read_manifest(const std::string& dir);
// A manifest's text as read from `path` (named in errors). The artifact may be damaged or hostile (any
// user who can write to the snapshot directory's owner's files, a disk error): errors, never a crash.
Result<Manifest> manifest_from_text(std::string_view text, const std::string& path);

}  // namespace fr::snapshot
