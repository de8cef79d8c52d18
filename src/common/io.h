// Full-length I/O helpers over raw fds: retry on EINTR and short counts, report the path in errors.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "common/result.h"

namespace fr {

Status pread_full(int fd, void* buf, size_t n, uint64_t off, const std::string& path);
Status write_full(int fd, const void* buf, size_t n, const std::string& path);
Result<std::string> read_file(const std::string& path, size_t max_bytes);

}  // namespace fr
