// DaemonClient: one connection to a fastrestart-weightd, past the greeting (docs/protocol.md).
// Used by engine_loader, fastrestart-weightctl and (later) fastrestartd. Not thread-safe: one per thread.
#pragma once

#include <string>

#include "common/unix_socket.h"
#include "protocol/frame.h"

namespace fr::loader {

class DaemonClient {
 public:
  // Connects (retrying while the socket is absent until the deadline) and exchanges hellos.
  static Result<DaemonClient> connect(const std::string& socket_path, double timeout_s, const std::string& client_name);

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

}  // namespace fr::loader
