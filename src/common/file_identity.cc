#include "common/file_identity.h"

#include <sys/stat.h>

#include <climits>
#include <cstdlib>

namespace fr {

Result<FileIdentity> identify_file(const std::string& path) {
  char buf[PATH_MAX];
  if (!::realpath(path.c_str(), buf)) return sys_error("resolve " + path);
  struct stat st {};
  if (::stat(buf, &st) != 0) return sys_error("stat " + path);
  if (!S_ISREG(st.st_mode)) return make_error(Errc::kInvalidArgument, path + ": not a regular file");
  FileIdentity id;
  id.path = buf;
  id.dev = st.st_dev;
  id.ino = st.st_ino;
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
  id.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000LL + st.st_ctim.tv_nsec;
  return id;
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
