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

}  // namespace fr
