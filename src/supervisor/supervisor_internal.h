// Private to the Supervisor's .cc files: the records of its children and of a pending reload.
#pragma once

#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"
#include "supervisor/loop.h"
#include "supervisor/supervisor.h"

namespace fr::supervisor {

// A file in the state directory (control.state_dir, else $STATE_DIRECTORY/<name>, /var/lib/fastrestart/<name>
// for root, ~/.local/state/fastrestart/<name>).
std::string state_path(const Config& c, const std::string& name);
// Writes `text` to `path` atomically, mode 0600, creating its directory 0700 if needed.
Status write_private_file(const std::string& path, const std::string& text);

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
  int respawns = 0;                  // after unexpected deaths (backoff); reset after a stable run
  double spawned_at = 0;             // loop time of the last spawn
  std::unique_ptr<Timer> respawn;
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
