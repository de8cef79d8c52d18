// fastrestartd's state directory and the private files in it (flags.json, engine.pgid, standby.pgid,
// the lock and its claims, snapshots/ by default).
#pragma once

#include <string>

#include "common/atomic_file.h"  // write_private_file, for the files here
#include "fastrestart/result.h"
#include "supervisor/config.h"

namespace fr::supervisor {

// <control.state_dir>, or its default (/var/lib/fastrestart/<name>, $STATE_DIRECTORY/<name>, ~/.local/state/...).
std::string state_dir(const Config& c);
// A file in the state directory (control.state_dir, else $STATE_DIRECTORY/<name>, /var/lib/fastrestart/<name>
// for root, ~/.local/state/fastrestart/<name>).
std::string state_path(const Config& c, const std::string& name);

}  // namespace fr::supervisor
