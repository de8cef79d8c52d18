#include "common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "common/fd.h"
#include "common/io.h"

namespace fr {

namespace {

std::string parent_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Removes the temporary whatever happened, keeping the first error (unlink may change errno).
struct TmpGuard {
  const std::string& tmp;
  bool armed = true;
  ~TmpGuard() {
    if (!armed) return;
    const int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
  }
};

}  // namespace

namespace {

// The temporary written whole and renamed over `path`; with `durable`, fsync'ed before the rename and the
// directory after it.
Status replace_file(const std::string& path, const std::string& text, mode_t mode, bool durable) {
  const std::string tmp = path + ".tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd) return sys_error("open " + tmp);
  TmpGuard guard{tmp};
  FR_TRY(write_full(fd.get(), text.data(), text.size(), tmp));
  if (::fchmod(fd.get(), mode) != 0) return sys_error("chmod " + tmp);
  // Data before the rename: otherwise a crash can leave `path` renamed but empty (ext4, xfs).
  if (durable && ::fsync(fd.get()) != 0) return sys_error("fsync " + tmp);
  // close() reports the deferred write errors of some file systems (NFS): check it.
  if (::close(fd.release()) != 0) return sys_error("close " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return sys_error("rename " + tmp + " to " + path);
  guard.armed = false;
  if (!durable) return {};
  // The rename itself is durable once the directory is.
  const std::string dir = parent_of(path);
  UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd) return sys_error("open directory " + dir);
  if (::fsync(dfd.get()) != 0 && errno != EINVAL) return sys_error("fsync directory " + dir);
  return {};
}

}  // namespace

Status write_file_atomic(const std::string& path, const std::string& text, mode_t mode) {
  return replace_file(path, text, mode, true);
}

Status write_file_replace(const std::string& path, const std::string& text, mode_t mode) {
  return replace_file(path, text, mode, false);
}

Status write_private_file(const std::string& path, const std::string& text) {
  const auto dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir.parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return sys_error("mkdir " + dir.string());
  return write_file_atomic(path, text, 0600);  // fsync'ed; no half-written file or stray .tmp on failure
}

}  // namespace fr
