// <state_dir>/engine.pgid: which process group the running engine leads, so that the next fastrestartd
// can kill what a SIGKILLed one left of it (kill_recorded_group, child.h). The record holds the group
// id and the start time of its leader (/proc/<pid>/stat field 22): a pgid names a group only while the
// group exists, and once it is gone the same number can lead an unrelated group of the same user.
#pragma once

#include <sys/types.h>

#include <string>

#include "supervisor/config.h"

namespace fr::supervisor {

// "<pgid> <leader start time>\n" for a group whose leader `pgid` runs now; "<pgid>\n" when its start
// time cannot be read (such a record is never acted on).
std::string engine_group_record(pid_t pgid);

// SIGKILLs the engine's and the standby's groups that a previous fastrestartd of `cfg` left running (their
// records engine.pgid and standby.pgid in its state directory; kill_recorded_group, child.h), saying so in
// the log; returns how many. fastrestartd does it before it binds the engine's port, which such a group's
// processes may still hold, and again as its run begins.
int kill_left_engine_groups(const Config& cfg);

}  // namespace fr::supervisor
