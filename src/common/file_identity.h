// FileIdentity: what a file is, from stat(2) alone (ARCHITECTURE.md, "The fingerprint
// covers content and file identity"). A file rewritten in place changes
// ctime even when its mtime is restored (touch -r); a file replaced by rename changes the inode. Either
// way the identity differs, so an engine can never be handed the weights of an older file.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace fr {

struct FileIdentity {
  std::string path;  // absolute, as given after realpath(3)
  uint64_t dev = 0;
  uint64_t ino = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

// stat()s `path` (following symlinks: the identity is the file's, the path the caller's canonical one).
Result<FileIdentity> identify_file(const std::string& path);

// The identity of the file open as `fd` (fstat), its path read back from /proc/self/fd: what a reader of
// `fd` reads, whatever a path or a symlink that led to it names now. `what` names the file in errors. An
// engine that identifies the descriptors it reads from cannot publish one file's bytes under another's
// identity when a symlink is retargeted during its load (docs/reliability.md, "How files are identified").
Result<FileIdentity> identify_fd(int fd, const std::string& what);

// How `now` differs from `was` (the same path identified earlier), as "<field> differs: <what that means>",
// or "" when they are equal. Used where bytes read after `was` must still be the file's.
std::string identity_change(const FileIdentity& was, const FileIdentity& now);

}  // namespace fr
