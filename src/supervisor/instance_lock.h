// One fastrestartd per model: an exclusive flock(2) on <state_dir>/fastrestartd.lock, taken before anything
// touches the state directory, the sockets or processes. A second `fastrestartd --config X` would otherwise
// take over the first one's engine.pgid (and SIGKILL its live engine) or unlink its control socket.
#pragma once

#include "common/private_dir.h"
#include "fastrestart/result.h"
#include "supervisor/config.h"

namespace fr::supervisor {

// The lock file of `c`'s instance: <state_dir>/fastrestartd.lock.
std::string instance_lock_path(const Config& c);

// Creates the state directory (0700) if needed and takes the lock, writing our pid into it; held until
// the LockFile is dropped (the kernel drops it when the process dies, however it dies).
// Errc::kBusy when another process holds it: the message names that process's pid, the lock file and
// the config. Other errors name the directory or file and the errno text.
Result<LockFile> acquire_instance_lock(const Config& c);

}  // namespace fr::supervisor
