// The engine's private endpoint (docs/listen-socket.md, "The private endpoint"): a listening socket
// fastrestartd opens for one engine process, on a loopback port no client is told about, and passes to it
// beside the public socket (fd 4, LISTEN_FDNAMES ...:fastrestart-probe). fastrestartd's readiness and
// health checks go there, so they never wait in the public accept queue behind clients' requests: READY
// follows the first moment the engine can answer, whatever the clients queued meanwhile.
//
// Contract
// - open_private_endpoint(): a TCP socket bound to 127.0.0.1 on a port the kernel picks, listening,
//   close-on-exec. The caller passes it to one spawn (SpawnSpec::probe_fd) and then closes its copy, so the
//   socket lives exactly as long as the engine that holds it: after the engine's death a connection to the
//   port is refused at once, never queued for a process that is gone.
// - Errors are Errc::kIo naming the step (socket, bind, listen, getsockname) and errno's words.
// - Loopback only: any local user can connect to the port, as to the engine's public port; the endpoint
//   carries the same requests the public port does, nothing more.
#pragma once

#include <cstdint>
#include <string>

#include "common/fd.h"
#include "fastrestart/listen_names.h"
#include "fastrestart/result.h"

namespace fr::supervisor {

// LISTEN_FDNAMES's name for it (what the engine helpers look for: fastrestart/listen_socket.h,
// fastrestart.listen).
using fastrestart::kProbeFdName;
inline constexpr const char* kProbeHost = "127.0.0.1";

struct PrivateEndpoint {
  UniqueFd fd;
  uint16_t port = 0;
};

Result<PrivateEndpoint> open_private_endpoint();

struct Config;
struct Engine;
struct SpawnSpec;

// For one spawn of an engine or standby: with readiness.endpoint = "private", opens its endpoint, puts it
// in `spec` (probe_fd; spec.listen_fd must be set already) and records the port and the note in `e`.
// Returns the descriptor to close once the spawn is done (invalid when none was opened). A snapshottable
// engine (spec.new_pid_namespace) gets none: a restore would bring back a socket fastrestartd no longer
// knows; its checks stay on the public port and the note says why. So does a failure to open it (logged).
UniqueFd prepare_private_endpoint(const Config& cfg, SpawnSpec& spec, Engine& e);

}  // namespace fr::supervisor
