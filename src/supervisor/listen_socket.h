// The engine's listening socket when fastrestartd owns it (engine.listen = "supervisor";
// docs/listen-socket.md). Bound and listening from fastrestartd's startup to its exit: every engine,
// standby and restart gets the same socket (SpawnSpec::listen_fd), so a connection made while no engine
// accepts waits in the kernel's accept queue instead of being refused.
//
// Contract
// - open(): binds host:port with SO_REUSEADDR (never SO_REUSEPORT: a second listener on the port must fail,
//   not share its traffic) and listens with `backlog`. `host` is an IPv4 or IPv6 literal or a name; a name
//   binds its first address that binds. Errors name the address and the config fields
//   (engine.host/engine.port): Errc::kBusy when the address is in use, Errc::kInvalidArgument when the
//   name does not resolve, Errc::kIo otherwise.
// - The descriptor is close-on-exec: only the children spawn_child() is told to pass it to get it (as fd 3).
// - fastrestartd never accepts on it and never changes its file status flags (O_NONBLOCK is shared by
//   every process that holds the socket: the engine sets the mode it needs).
// - Closed on destruction only, which is fastrestartd's exit.
#pragma once

#include <cstdint>
#include <string>

#include "common/fd.h"
#include "fastrestart/listen_names.h"
#include "fastrestart/result.h"

namespace fr::supervisor {

// The name passed in LISTEN_FDNAMES for the socket (what the engine_loader's helper looks for).
using fastrestart::kListenFdName;

// What open()'s errors name: the socket of engine.listen = "supervisor", the front's public one and the
// engines' loopback one of engine.listen = "front".
inline constexpr const char* kEngineFields = "engine.host, engine.port; engine.listen = \"supervisor\"";
inline constexpr const char* kFrontFields = "engine.host, engine.port; engine.listen = \"front\"";
inline constexpr const char* kUpstreamFields = "front.upstream_port; engine.listen = \"front\"";

class ListenSocket {
 public:
  // `fields`: the config fields named in errors (kEngineFields, kFrontFields, kUpstreamFields).
  static Result<ListenSocket> open(const std::string& host, uint16_t port, int backlog, const char* fields = kEngineFields);

  int fd() const { return m_fd.get(); }
  // The socket's inode (as /proc/<pid>/fd shows "socket:[inode]"): who holds it besides us is not a
  // stray listener.
  uint64_t inode() const { return m_inode; }
  // "host:port" with the port as bound ("[::1]:8000" for IPv6).
  const std::string& address() const { return m_address; }
  uint16_t port() const { return m_port; }

 private:
  UniqueFd m_fd;
  uint64_t m_inode = 0;
  std::string m_address;
  uint16_t m_port = 0;
};

}  // namespace fr::supervisor
