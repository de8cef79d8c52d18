// The health listener's socket: parses "host:port" / "[v6]:port" and binds it, so that every way it can
// fail (syntax, resolution, bind, listen) is an error quoting the address and saying why.
#pragma once

#include <string>

#include "common/fd.h"
#include "common/result.h"

namespace fr::health {

struct ListenAddress {
  std::string host;  // without brackets
  int port = 0;      // 0: an ephemeral port
};

// Errors: kInvalidArgument quoting `listen` ("expected host:port", a bad port, an unbracketed IPv6 address).
fr::Result<ListenAddress> parse_listen(const std::string& listen);

struct BoundSocket {
  UniqueFd fd;     // listening, non-blocking, close-on-exec
  int family = 0;  // AF_INET or AF_INET6
  uint16_t port = 0;
};

// Resolves and binds the first address that works, with SO_REUSEADDR only: no SO_REUSEPORT, so a second
// supervisor on the same port is a bind error ("Address already in use") instead of a silent share.
// Errors: kIo naming `listen` and the failing step (resolution, socket, bind, listen).
fr::Result<BoundSocket> bind_listen(const std::string& listen, int backlog);

}  // namespace fr::health
