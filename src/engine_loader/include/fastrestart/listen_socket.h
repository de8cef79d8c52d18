// listen_socket: the engine's side of a listening socket handed down by its supervisor
// (docs/listen-socket.md), with systemd's convention (sd_listen_fds(3)), so a restart never closes the port.
//
// Contract
// - fastrestartd with engine.listen = "supervisor" starts every engine and standby with the socket as fd 3
//   and LISTEN_FDS=1, LISTEN_PID=<the engine's pid>, LISTEN_FDNAMES=fastrestart-engine. A systemd socket
//   unit passes sockets the same way, so an engine that uses this helper also runs socket-activated.
// - inherited_listen_socket(name) returns the passed listening socket, close-on-exec, owned by the caller;
//   -1 when none was passed to this process: LISTEN_PID or LISTEN_FDS unset, LISTEN_PID another process's
//   pid (the variables leaked through a parent: one line on stderr says so, naming both pids, since with
//   fastrestartd it means a wrapper forked instead of exec'ing the engine), or `name` given and
//   LISTEN_FDNAMES set without it. With
//   several descriptors and no LISTEN_FDNAMES, `name` cannot pick one: -1 (an empty name takes fd 3).
// - It removes LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES from the environment whenever LISTEN_PID or
//   LISTEN_FDS was set, so processes the engine starts (workers) do not take the socket for theirs: call it
//   once, in the process that serves, before starting children. A second call returns -1.
// - Errors (Errc::kInvalidArgument naming the variable and its value): LISTEN_FDS or LISTEN_PID not a
//   number, LISTEN_FDNAMES with another count of names; the picked descriptor not a listening TCP socket
//   (IPv4 or IPv6, SOCK_STREAM, IPPROTO_TCP, SO_ACCEPTCONN): the message names what it is instead
//   ("LISTEN_FDS=1: descriptor 3 is a listening Unix (AF_UNIX) stream socket, not a listening TCP socket";
//   "... is not open", "... is a regular file"). The variables are removed in these cases too.
// - It never changes the socket's file status flags: O_NONBLOCK is shared by every process holding it
//   (fastrestartd and a parked standby included), so the engine sets the mode it needs itself.
// - inherited_listen_sockets() takes the public socket and the private endpoint together (below).
// - An engine must not accept before it can serve: until then connections wait in the kernel's queue.
//   Not thread-safe with other users of the environment.
#pragma once

#include <string_view>

#include "fastrestart/engine_loader.h"  // Result, Error, Errc
#include "fastrestart/listen_names.h"

namespace fastrestart {

// kListenFdName and kProbeFdName (fastrestart/listen_names.h). The engine's private endpoint
// (docs/listen-socket.md, "The private endpoint"): with readiness.endpoint = "private" fastrestartd passes
// it as fd 4 beside the public socket (LISTEN_FDS=2, LISTEN_FDNAMES=fastrestart-engine:fastrestart-probe)
// and sends its readiness and health checks there, never through the clients' accept queue.

Result<int> inherited_listen_socket(std::string_view name = kListenFdName);

// Both sockets in one call (the variables are removed after the first call): `serve` is the public socket,
// `probe` the private endpoint; -1 for one not passed. An engine serves the same routes on both and starts
// accepting on `probe` no later than on `serve`, from the moment it can answer. Errors as above.
struct InheritedSockets {
  int serve = -1;
  int probe = -1;
};
Result<InheritedSockets> inherited_listen_sockets();

}  // namespace fastrestart
