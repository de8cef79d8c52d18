// <state_dir>/engine.pgid: which process group the running engine leads, so that the next fastrestartd
// can kill what a SIGKILLed one left of it (kill_recorded_group, child.h). The record holds the group
// id and the start time of its leader (/proc/<pid>/stat field 22): a pgid names a group only while the
// group exists, and once it is gone the same number can lead an unrelated group of the same user.
#pragma once

#include <sys/types.h>

#include <string>

namespace fr::supervisor {

// "<pgid> <leader start time>\n" for a group whose leader `pgid` runs now; "<pgid>\n" when its start
// time cannot be read (such a record is never acted on).
std::string engine_group_record(pid_t pgid);

}  // namespace fr::supervisor
