#include "common/file_identity.h"

#include <sys/stat.h>

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string>

namespace fr {

namespace {

FileIdentity from_stat(std::string path, const struct stat& st) {
  FileIdentity id;
  id.path = std::move(path);
  id.dev = st.st_dev;
  id.ino = st.st_ino;
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
  id.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000LL + st.st_ctim.tv_nsec;
  return id;
}

}  // namespace

Result<FileIdentity> identify_file(const std::string& path) {
  char buf[PATH_MAX];
  if (!::realpath(path.c_str(), buf)) return sys_error("resolve " + path);
  struct stat st {};
  if (::stat(buf, &st) != 0) return sys_error("stat " + path);
  if (!S_ISREG(st.st_mode)) return make_error(Errc::kInvalidArgument, path + ": not a regular file");
  return from_stat(buf, st);
}

Result<FileIdentity> identify_fd(int fd, const std::string& what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return sys_error("stat " + what);
  if (!S_ISREG(st.st_mode)) return make_error(Errc::kInvalidArgument, what + ": not a regular file");
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  char buf[PATH_MAX];
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  if (n < 0) return sys_error("read the path of " + what + " (" + link + ")");
  std::string path(buf, static_cast<size_t>(n));
  // A file unlinked or renamed over since it was opened: no path leads to these bytes any more, so they
  // can be read but never published or matched (the daemon re-checks identities by path).
  if (st.st_nlink == 0 || path.ends_with(" (deleted)"))
    return make_error(Errc::kCorrupt, what + ": the file was removed or replaced after it was opened");
  return from_stat(std::move(path), st);
}

std::string identity_change(const FileIdentity& was, const FileIdentity& now) {
  if (was.path != now.path) return "path differs: it now resolves to " + now.path;
  if (was.dev != now.dev || was.ino != now.ino)
    return std::string(was.dev != now.dev ? "dev" : "ino") + " differs: the file was replaced";
  if (was.size != now.size) return "size differs: the file was rewritten or truncated";
  if (was.mtime_ns != now.mtime_ns) return "mtime_ns differs: the file was rewritten";
  if (was.ctime_ns != now.ctime_ns) return "ctime_ns differs: the file was rewritten or its metadata changed";
  return "";
}

}  // namespace fr
