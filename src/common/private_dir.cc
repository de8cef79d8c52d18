#include "common/private_dir.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/io.h"

namespace fr {

Status check_private_dir(const std::string& what, const std::string& path, std::optional<gid_t> gid) {
  const mode_t want = gid ? 0750 : 0700;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return make_error(Errc::kNotFound, what + " " + path + " does not exist");
    return sys_error("stat " + path);
  }
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
  if (S_ISLNK(st.st_mode))
    return make_error(Errc::kPermissionDenied, what + " " + path + " is a symlink; refusing to use it");
  if (!S_ISDIR(st.st_mode)) return make_error(Errc::kPermissionDenied, what + " " + path + " is not a directory");
  if (st.st_uid != ::geteuid())
    return make_error(Errc::kPermissionDenied, what + " " + path + " is owned by uid " + std::to_string(st.st_uid) +
                                                   ", not by us (uid " + std::to_string(::geteuid()) + ")");
  if ((st.st_mode & 07777) & ~want)
    return make_error(Errc::kPermissionDenied, what + " " + path + " has mode " + mode + ", more open than " +
                                                   (gid ? "0750" : "0700") + "; refusing to use it");
  if (gid && st.st_gid != *gid)
    return make_error(Errc::kPermissionDenied, what + " " + path + " belongs to group " + std::to_string(st.st_gid) +
                                                   ", not the configured group " + std::to_string(*gid));
  return {};
}

Status ensure_private_dir(const std::string& path, std::optional<gid_t> gid) {
  const mode_t want = gid ? 0750 : 0700;
  if (::mkdir(path.c_str(), want) == 0) {
    // Fresh: set the exact mode (the umask may have narrowed it) and the group.
    if (gid && ::chown(path.c_str(), static_cast<uid_t>(-1), *gid) != 0) return sys_error("chown " + path);
    if (::chmod(path.c_str(), want) != 0) return sys_error("chmod " + path);
  } else if (errno != EEXIST) {
    return sys_error("create socket directory " + path);
  }
  FR_TRY(check_private_dir("socket directory", path, gid));
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return sys_error("stat " + path);
  if ((st.st_mode & 07777) != want && ::chmod(path.c_str(), want) != 0) return sys_error("chmod " + path);
  return {};
}

std::string default_socket_dir() {
  if (::geteuid() == 0) return "/run/fastrestart";
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x) return std::string(x) + "/fastrestart";
  return "/tmp/fastrestart-" + std::to_string(::geteuid());
}

bool LockFile::held(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  std::ifstream locks("/proc/locks");
  if (locks) {
    // "1: FLOCK  ADVISORY  WRITE 1234 00:2c:1311 0 EOF": major:minor (hex) and inode of the locked file.
    char want[64];
    std::snprintf(want, sizeof want, "%02x:%02x:%llu", major(st.st_dev), minor(st.st_dev),
                  static_cast<unsigned long long>(st.st_ino));
    std::string line;
    while (std::getline(locks, line)) {
      std::istringstream in(line);
      std::string n, kind, adv, mode, pid, id;
      if (in >> n >> kind) {
        if (kind == "->") in >> kind;  // a blocked waiter
        if (in >> adv >> mode >> pid >> id && kind == "FLOCK" && id == want) return true;
      }
    }
  }
  // Not listed (or no /proc/locks): a file system that names devices differently there (overlayfs), or
  // no holder. The pid the holder wrote decides; a dead daemon's pid is gone.
  auto holder = read_file(path, 64);
  if (!holder.ok()) return false;
  if (holder->empty()) return true;  // created, pid not written yet: being taken
  char* end = nullptr;
  long pid = std::strtol(holder->c_str(), &end, 10);
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

Result<LockFile> LockFile::acquire(const std::string& path, const std::string& note) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) return sys_error("open lock " + path);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) return sys_error("flock " + path);
      auto holder = read_file(path, 64);
      if (holder.ok()) holder->erase(std::min(holder->find('\n'), holder->size()));  // the pid, not the note
      std::string who = holder.ok() && !holder->empty() ? " (pid " + *holder + ")" : "";
      return make_error(Errc::kBusy, "another daemon holds " + path + who);
    }
    // The previous holder may have unlinked the file between our open and flock: then we locked an
    // orphan inode. Retry until the lock we hold is the file at `path`.
    struct stat a {}, b {};
    if (::fstat(fd.get(), &a) != 0) return sys_error("stat " + path);
    if (::stat(path.c_str(), &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) continue;
    std::string pid = std::to_string(::getpid()) + (note.empty() ? "" : "\n" + note);
    if (::ftruncate(fd.get(), 0) != 0) return sys_error("truncate " + path);
    FR_TRY(write_full(fd.get(), pid.data(), pid.size(), path));
    LockFile l;
    l.m_path = path;
    l.m_fd = std::move(fd);
    return l;
  }
  return make_error(Errc::kBusy, "could not take " + path + ": it keeps being replaced");
}

LockFile::~LockFile() {
  if (m_fd) ::unlink(m_path.c_str());
}

Result<gid_t> resolve_group(const std::string& name) {
  if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos)
    return static_cast<gid_t>(std::stoul(name));
  group* g = ::getgrnam(name.c_str());
  if (!g) return make_error(Errc::kInvalidArgument, "unknown group '" + name + "'");
  return g->gr_gid;
}

}  // namespace fr
