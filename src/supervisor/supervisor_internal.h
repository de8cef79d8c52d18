// Private to the Supervisor's .cc files: the records of its children and of a pending reload.
#pragma once

#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/file_identity.h"
#include "supervisor/loop.h"
#include "supervisor/supervisor.h"
#include "supervisor/vllm_report.h"

namespace fr::supervisor {

struct Supervisor::Engine {
  pid_t pid = -1;
  UniqueFd pidfd;
  UniqueFd output;
  std::unique_ptr<LineReader> reader;
  double spawned_at = 0;
  double died_at = 0;
  bool exited = false;
  int status = 0;
  bool stop_requested = false;
  bool killed_timeout = false;
  bool killed_hang = false;
  bool warm_expected = false;
  std::string path;  // "cold" | "warm" once ready
  std::deque<std::string> tail;
  std::optional<uint64_t> oom_before;
  std::vector<std::string> flags;
  VllmReport vllm;   // kind vllm: what it said about itself
  bool strict = false;  // vllm-preload: started with ipc_cache fallback false
};

struct Supervisor::Daemon {
  std::string gpu;     // as configured ("" for the host backend)
  std::string socket;  // its socket path
  pid_t pid = -1;
  UniqueFd output;
  std::unique_ptr<LineReader> reader;
  bool exited = false;
  bool stopping = false;
  bool ready = false;
  bool failed = false;
  std::string error;
  nlohmann::json status = nlohmann::json::object();  // last status reply
  int respawns = 0;                  // after unexpected deaths (backoff)
  std::unique_ptr<Timer> respawn;
};

// weights.daemon = "vllm-preload": one `vllm preload` launcher, which runs a daemon rank per local GPU.
struct Supervisor::Preload {
  pid_t pid = -1;                    // also its process group (the ranks are in it)
  UniqueFd output;
  std::unique_ptr<LineReader> reader;
  std::vector<std::string> argv;
  uint16_t health_port = 0;
  bool exited = false;
  bool stopping = false;
  bool ready = false;
  bool failed = false;
  bool probe_in_flight = false;
  std::string error;
  double spawned_at = 0;
  double last_output = 0;            // progress, for weights.load_timeout_s
  double ready_at = 0;
  std::vector<FileIdentity> checkpoint;  // the checkpoint files when it started loading
  std::deque<std::string> tail;      // its last lines: why it died
};

struct Supervisor::PendingReload {
  std::vector<std::string> new_flags, old_flags;
  bool cold = false;
  double started = 0;
  bool rolled_back = false;
  std::string rollback_reason;
  std::vector<std::shared_ptr<std::promise<nlohmann::json>>> waiters;
};

}  // namespace fr::supervisor
