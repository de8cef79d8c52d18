#include "common/io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "common/fd.h"

namespace fr {

Status pread_full(int fd, void* buf, size_t n, uint64_t off, const std::string& path) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      return sys_error("read " + path);
    }
    if (r == 0) return make_error(Errc::kCorrupt, path + ": unexpected end of file at offset " + std::to_string(off));
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return {};
}

Status write_full(int fd, const void* buf, size_t n, const std::string& path) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t r = ::write(fd, p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      return sys_error("write " + path);
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return {};
}

Result<std::string> read_file(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sys_error("open " + path);
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t r = ::read(fd.get(), buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      return sys_error("read " + path);
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
    if (out.size() > max_bytes) return make_error(Errc::kInvalidArgument, path + ": larger than " + std::to_string(max_bytes) + " bytes");
  }
  return out;
}

}  // namespace fr
