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
#include <vector>

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
  // One client connection: its thread owns nothing; the server closes `fd` after joining it, so a
  // shutdown() from ~ControlServer never hits a reused descriptor.
  struct Connection {
    UniqueFd fd;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  ControlServer() = default;
  void serve();
  void serve_connection(Connection& c);
  // Joins and closes finished connections (all of them, shutting them down first, when `all`).
  void reap(std::vector<std::unique_ptr<Connection>>& conns, bool all);
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
