// Running CRIU (docs/snapshot.md, "CRIU"). fastrestart needs CRIU >= 4.1 (the vDSO change of 6.x kernels;
// Debian 12's 3.17 fails there); scripts/build-criu.sh builds 4.2.1.
#pragma once

#include <string>
#include <vector>

#include "common/fd.h"
#include "fastrestart/result.h"

namespace fr::snapshot {

inline constexpr int kCriuMinMajor = 4, kCriuMinMinor = 1;

struct CriuInfo {
  std::string path;
  std::string version;  // "4.2.1"
};

// Runs `<path> --version`. Errors say what is wrong: "criu not found at /usr/sbin/criu (build it with
// scripts/build-criu.sh ...)", "criu at X is 3.17, snapshots need >= 4.1".
Result<CriuInfo> probe_criu(const std::string& path);

// Runs a program to completion (stdout and stderr to `log_path`, appended; stdin /dev/null; fds listed in
// `keep_fds` stay open at their numbers). Returns the wait status.
Result<int> run_program(const std::vector<std::string>& argv, const std::string& log_path,
                        const std::vector<int>& keep_fds = {});

// Serializes `criu dump`s on this host while alive (a blocking flock on a lock file that is never
// removed). Why: dumping a task whose PID namespace differs from /proc's, CRIU's parasite mounts a private
// /proc at a fixed path in the task's root; two such dumps at once collide there (EEXIST, "Parasite failed
// to dump /proc/self/cgroup"). Every snapshottable engine is such a task.
class DumpLock {
 public:
  static Result<DumpLock> acquire(const std::string& path = kDefaultPath);
  static constexpr const char* kDefaultPath = "/run/lock/fastrestart-criu-dump.lock";

 private:
  explicit DumpLock(UniqueFd fd) : m_fd(std::move(fd)) {}
  UniqueFd m_fd;  // closing it releases the flock
};

// "exit code 1" / "signal 9".
std::string describe_status(int wait_status);
// The last `n` lines of a file that mention "Error" (CRIU's log), for messages.
std::string log_errors(const std::string& path, size_t n = 3);

}  // namespace fr::snapshot
