#include "common/close_fds.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace fr {
namespace {

// The raw system call: glibc's wrapper is newer than some of the systems built for, and its absence
// must be found at run time (ENOSYS), not at link time.
bool close_range_supported(unsigned first, unsigned last) {
#ifdef SYS_close_range
  return ::syscall(SYS_close_range, first, last, 0U) == 0 || errno != ENOSYS;
#else
  (void)first;
  (void)last;
  return false;
#endif
}

bool kept(int fd, const int* keep, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (keep[i] == fd) return true;
  return false;
}

// Parses a /proc/self/fd entry's name ("12"); -1 for "." and "..".
int fd_number(const char* name) {
  int v = 0;
  if (*name == '\0') return -1;
  for (; *name; ++name) {
    if (*name < '0' || *name > '9') return -1;
    v = v * 10 + (*name - '0');
  }
  return v;
}

// The fallback: /proc/self/fd through getdents64 (opendir allocates). False when /proc cannot be read.
bool close_listed(const int* keep, size_t n) {
  const int dir = ::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return false;
  alignas(8) char buf[4096];
  // Closing while listing: an entry already returned may go; the directory's offsets are descriptor
  // numbers, so no entry is skipped.
  for (;;) {
    const long got = ::syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (got <= 0) break;
    for (long off = 0; off < got;) {
      struct Entry {
        unsigned long long ino;
        long long off;
        unsigned short reclen;
        unsigned char type;
        char name[1];
      };
      const auto* e = reinterpret_cast<const Entry*>(buf + off);
      const int fd = fd_number(e->name);
      if (fd >= 3 && fd != dir && !kept(fd, keep, n)) ::close(fd);
      off += e->reclen;
    }
  }
  ::close(dir);
  return true;
}

}  // namespace

void close_fds_except(const int* keep_in, size_t n) noexcept {
  if (n > kMaxKeptFds) n = kMaxKeptFds;
  // The kept numbers >= 3, sorted (insertion sort: a handful), without repeats.
  int keep[kMaxKeptFds];
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    const int fd = keep_in[i];
    if (fd < 3 || kept(fd, keep, k)) continue;
    size_t j = k++;
    for (; j > 0 && keep[j - 1] > fd; --j) keep[j] = keep[j - 1];
    keep[j] = fd;
  }
  unsigned from = 3;
  bool ranges = true;
  for (size_t i = 0; i < k && ranges; ++i) {
    const auto fd = static_cast<unsigned>(keep[i]);
    if (fd > from) ranges = close_range_supported(from, fd - 1);
    from = fd + 1;
  }
  if (ranges && close_range_supported(from, ~0U)) return;
  if (close_listed(keep, k)) return;
  rlimit lim{};
  long max = ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY ? static_cast<long>(lim.rlim_cur) : 65536;
  if (max > 65536) max = 65536;
  for (int fd = 3; fd < max; ++fd)
    if (!kept(fd, keep, k)) ::close(fd);
}

}  // namespace fr
