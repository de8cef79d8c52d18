// Closing what a child must not inherit, between fork and exec (docs/reliability.md, "Descriptors a child
// gets").
#pragma once

#include <cstddef>

namespace fr {

// Closes every descriptor >= 3 of the calling process except those in keep[0..n) (entries < 3 or repeated
// are fine). For the child between fork(2) and execve(2): async-signal-safe, no allocation, no lock.
// close_range(2) first (Linux 5.9); on a kernel without it, the descriptors /proc/self/fd lists, read with
// getdents64 into a buffer on the stack; without /proc either, every number below RLIMIT_NOFILE (at most
// 65536). `n` is at most kMaxKeptFds; more are ignored (none is closed past the first kMaxKeptFds).
inline constexpr size_t kMaxKeptFds = 8;
void close_fds_except(const int* keep, size_t n) noexcept;

}  // namespace fr
