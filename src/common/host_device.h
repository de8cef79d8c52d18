// Names of the host backend's "devices" (docs/protocol.md, "Sockets").
//
// The host backend keeps weights in memfds, not on a GPU. One host daemon is named "host"; several (one
// per entry of a tensor-parallel test's `gpus`, each standing for one GPU) are named "host-<name>", and
// an engine reaches the daemon of entry <name> with the engine_loader device "host:<name>". The name is
// 1-32 characters of [A-Za-z0-9_.-], so it is safe in a socket file name.
#pragma once

#include <string>
#include <string_view>

#include "fastrestart/result.h"

namespace fr {

// The daemon identity ("UUID") of a host device: "host" for the empty name, else "host-<name>";
// Errc::kInvalidArgument naming the fault for a name outside the rule above.
Result<std::string> host_device_uuid(std::string_view name);

}  // namespace fr
