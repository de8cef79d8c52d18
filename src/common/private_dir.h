// The runtime directory for sockets and locks (docs/protocol.md, "Socket directory").
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "common/fd.h"
#include "common/result.h"

namespace fr {

// Creates `path` if absent, then insists it is a real directory (not a symlink), owned by our euid, with
// mode 0700, or 0750 and group `gid` when a group is given. A directory with more permissive bits (world
// or group writable, world readable) is refused rather than fixed: someone else may already have used it.
Status ensure_private_dir(const std::string& path, std::optional<gid_t> gid);

// The same rule for a directory that must already exist, creating and changing nothing: a real directory,
// owned by our euid, no mode bit beyond 0700 (0750 and group `gid` when a group is given). `what` begins the
// message ("snapshot directory"): "<what> <path> has mode 0770, more open than 0700; refusing to use it",
// "<what> <path> is owned by uid 65534, not by us (uid 0)". Errc::kPermissionDenied (kNotFound: absent).
Status check_private_dir(const std::string& what, const std::string& path, std::optional<gid_t> gid);

// The default directory: /run/fastrestart for root, else $XDG_RUNTIME_DIR/fastrestart, else
// /tmp/fastrestart-<uid>.
std::string default_socket_dir();

// An exclusive flock(2) on `path`, created 0600, holding our pid as text (then, when given, a newline and
// `note`: who holds it, for the message of the next one to try). Errc::kBusy names the holder's pid.
// Dropping it unlinks the file first (while still locked), so a stale lock never survives its owner.
class LockFile {
 public:
  static Result<LockFile> acquire(const std::string& path, const std::string& note = {});
  LockFile() = default;
  LockFile(LockFile&&) noexcept = default;
  LockFile& operator=(LockFile&&) noexcept = default;
  ~LockFile();
  const std::string& path() const { return m_path; }

  // Whether some process holds the flock on `path` now, seen from /proc/locks (taking the lock to test it
  // could make a starting daemon's own acquire fail). A missing file is not held; when /proc/locks does not
  // list it, the pid the file holds decides (alive: held; an empty file is being taken).
  static bool held(const std::string& path);

 private:
  std::string m_path;
  UniqueFd m_fd;
};

// Resolves a group name or numeric gid.
Result<gid_t> resolve_group(const std::string& name_or_gid);

}  // namespace fr
