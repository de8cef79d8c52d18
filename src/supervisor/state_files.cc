#include "supervisor/state_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "common/atomic_file.h"

namespace fr::supervisor {

std::string state_dir(const Config& c) {
  if (!c.control.state_dir.empty()) return c.control.state_dir;
  if (const char* d = std::getenv("STATE_DIRECTORY"); d && *d) return std::string(d) + "/" + c.name;
  if (::geteuid() == 0) return "/var/lib/fastrestart/" + c.name;
  return std::string(std::getenv("HOME") ? std::getenv("HOME") : "/tmp") + "/.local/state/fastrestart/" + c.name;
}

std::string state_path(const Config& c, const std::string& name) { return state_dir(c) + "/" + name; }

Status write_private_file(const std::string& path, const std::string& text) {
  // Pushed flags may hold secrets (--api-key): the directory is created 0700 and the file is 0600.
  const auto dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir.parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return sys_error("mkdir " + dir.string());
  return write_file_atomic(path, text, 0600);  // fsync'ed; no half-written file or stray .tmp on failure
}

}  // namespace fr::supervisor
