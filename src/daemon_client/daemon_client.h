// DaemonClient: one connection to a fastrestart-weightd, past the greeting (docs/protocol.md).
// Used by the engine's library (engine_loader), fastrestart-weightctl, fastrestartd (the daemons' status and
// clearing a dead engine's leases) and fastrestart-snapshot; it depends on protocol and common only, so each
// of them links it without reaching into another's private headers. Not thread-safe: one per thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "common/unix_socket.h"
#include "protocol/frame.h"

namespace fr {

class DaemonClient {
 public:
  // Connects and exchanges hellos. No socket, or one that refuses, is Errc::kNotFound at once ("no daemon:
  // ...") unless the daemon is starting (its lock, beside the socket, is held): then the connect is retried
  // until `timeout_s`.
  static Result<DaemonClient> connect(const std::string& socket_path, double timeout_s, const std::string& client_name);
  // Connect attempts repeated because a daemon was starting, in this process (for tests and diagnostics).
  static uint64_t connect_retries();

  // Sends `req` and returns the ok reply (an error reply becomes an Error with its code). `fd` receives
  // the reply's descriptor, if any; a reply claiming one that did not arrive is a protocol error.
  Result<proto::json> call(const proto::json& req, double timeout_s, UniqueFd* fd = nullptr);

  const proto::json& hello() const { return m_hello; }
  std::string backend() const { return m_hello.value("backend", ""); }
  std::string gpu_uuid() const { return m_hello.value("gpu_uuid", ""); }
  int fd() const { return m_fd.get(); }

 private:
  UniqueFd m_fd;
  proto::json m_hello;
};

}  // namespace fr
