// Create and restore, as the helper (fastrestart-snapshot) runs them for fastrestartd
// (docs/snapshot.md, "Create" and "Restore"). Blocking; the caller is a process of its own.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <string>

#include "fastrestart/result.h"
#include "snapshot/gpu.h"
#include "snapshot/identity.h"
#include "snapshot/manifest.h"

namespace fr::snapshot {

struct CreateRequest {
  pid_t pid = -1;              // the engine: PID 1 of its own PID namespace, session leader
  std::string dir;             // the snapshot directory
  std::string criu;            // path of criu
  EngineSpec spec;
  std::string stdout_pipe;     // "pipe:[inode]" of the engine's stdout/stderr, or ""
  std::string version;         // fastrestart's
  std::string id;              // empty: a new time-based id
  // "socket:[inode]" of fastrestartd's listening socket, which the engine holds (engine.listen =
  // "supervisor"), or "". Set: the tree must hold it (checked before anything stops), the dump skips
  // connections waiting in its queue (they stay there, in fastrestartd's socket), and the images are
  // rewritten so that a restore takes the socket from its caller (listen_image.h).
  std::string listen_socket;
};

// Records the oracle, checkpoints the GPU state (if the engine holds any), `criu dump`s the tree (which
// ends it) and commits the artifact. On a failure before the dump ended the engine, the engine keeps
// running (its GPU state restored and unlocked).
Result<Manifest> create_snapshot(const CreateRequest& r, GpuCheckpointer& gpu);

struct RestoreRequest {
  std::string dir;
  std::string id;              // empty: the newest artifact
  std::string criu;
  EngineSpec spec;             // today's engine: its identity must equal the recorded one
  int stdout_fd = 1;           // becomes the restored engine's stdout/stderr
  // fastrestartd's listening socket (engine.listen = "supervisor"), or -1. It takes the place of the one
  // the artifact recorded; an artifact that recorded none, or one given none, is refused before CRIU runs.
  int listen_fd = -1;
  double oracle_timeout_s = 60;
};

struct Restored {
  pid_t pid = -1;              // the restored engine, our child (criu --restore-sibling)
  std::string id;
  nlohmann::json timings;      // identity_s, criu_restore_s, cuda_restore_s, oracle_s, total_s
};

// Refuses before CRIU runs when the identity differs (the message names the field). After CRIU: restores
// and unlocks the GPU state, checks the process runs and the CUDA state is "running", replays the oracle;
// any failure SIGKILLs and reaps the restored tree before returning the error.
Result<Restored> restore_snapshot(const RestoreRequest& r, GpuCheckpointer& gpu);

}  // namespace fr::snapshot
