// What one fastrestartd claims beyond its state directory (instance_lock.h): two instances with different
// state directories may still share a control socket, an engine port or a weight daemon's socket (the same
// GPU), and the second would unlink the first one's live control socket, start an engine on the port the
// first one's engine serves, or drive the first one's daemons. Each is refused at startup, before anything
// is touched, with a line naming the other instance (docs/supervisor.md, "One instance per model"):
//   - the control socket: an exclusive flock on <socket>.lock, held for life, and before the socket file
//     is unlinked a connect to it: a live listener there (one that took no lock) is refused too;
//   - each native weight daemon's socket: an exclusive flock on <socket>.owner, held for life;
//   - the engine's port: a socket already listening on engine.port whose process descends from another
//     running fastrestartd.
// The lock files hold the holder's pid, then its state directory and config, for the refusal's message.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/private_dir.h"
#include "fastrestart/result.h"
#include "supervisor/config.h"

namespace fr::supervisor {

struct InstanceClaims {
  LockFile control;               // <control socket>.lock
  std::vector<LockFile> daemons;  // <weight daemon socket>.owner, one per native daemon
};

// The claim file of a weight daemon's socket: "<socket>.owner".
std::string daemon_owner_path(const std::string& daemon_socket);

// Takes `c`'s claims: the control socket `socket`, the native daemons' sockets `daemon_sockets` (their
// directories made private as the control server and the daemons make them, for `group`), then checks the
// engine's port. Errc::kBusy when another instance
// holds one: the message names it (pid, state directory, config where known) and what both would share.
// Other errors name the file and the errno text.
Result<InstanceClaims> claim_instance(const Config& c, const std::string& socket, std::optional<gid_t> group,
                                      const std::vector<std::string>& daemon_sockets);

// The state directory of the running fastrestartd `pid`: the directory of the fastrestartd.lock it holds
// open. "" when it holds none or its /proc/<pid>/fd cannot be read.
std::string state_dir_of(pid_t pid);

}  // namespace fr::supervisor
