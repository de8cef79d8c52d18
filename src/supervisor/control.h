// The control socket of fastrestartd (docs/supervisor.md, "Control protocol"): frames of docs/protocol.md
// (length + JSON), one request and one reply at a time, no descriptors. Mode 0600 (0660 with a group);
// peers must share our uid or be in the group.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "common/fd.h"
#include "fastrestart/result.h"

namespace fr::supervisor {

class ControlServer {
 public:
  using Handler = std::function<nlohmann::json(const nlohmann::json&)>;
  // Creates the directory (private), removes a stale socket, listens, and serves on a thread.
  static Result<std::unique_ptr<ControlServer>> start(const std::string& path, std::optional<gid_t> group, Handler h);
  ~ControlServer();

 private:
  ControlServer() = default;
  void serve();
  std::string m_path;
  std::optional<gid_t> m_group;
  Handler m_handler;
  UniqueFd m_listen;
  UniqueFd m_wake_r, m_wake_w;
  std::thread m_thread;
};

// The default control socket for a model name.
std::string default_control_socket(const std::string& name);

}  // namespace fr::supervisor
