#include "supervisor/instance_lock.h"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>

#include "common/io.h"
#include "supervisor/state_files.h"

namespace fr::supervisor {

std::string instance_lock_path(const Config& c) { return state_path(c, "fastrestartd.lock"); }

Result<LockFile> acquire_instance_lock(const Config& c) {
  const std::string dir = state_dir(c);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(dir).parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return sys_error("create state directory " + dir);
  const std::string path = instance_lock_path(c);
  auto lock = LockFile::acquire(path);
  if (lock.ok() || lock.error().code != Errc::kBusy) return lock;
  // LockFile writes the holder's pid once it holds the lock; a holder caught in between shows no pid yet.
  auto holder = read_file(path, 64);
  std::string pid = holder.ok() && !holder->empty() ? *holder : "unknown";
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return make_error(Errc::kBusy, "another fastrestartd (pid " + pid + ") already runs with the state directory " + dir +
                                     " (it holds the lock " + path + "); not starting a second one for " + c.path +
                                     ": its engine, sockets and files are left alone");
}

}  // namespace fr::supervisor
