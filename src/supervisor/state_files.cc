#include "supervisor/state_files.h"

#include <unistd.h>

#include <cstdlib>

namespace fr::supervisor {

std::string state_dir(const Config& c) {
  if (!c.control.state_dir.empty()) return c.control.state_dir;
  if (const char* d = std::getenv("STATE_DIRECTORY"); d && *d) return std::string(d) + "/" + c.name;
  if (::geteuid() == 0) return "/var/lib/fastrestart/" + c.name;
  return std::string(std::getenv("HOME") ? std::getenv("HOME") : "/tmp") + "/.local/state/fastrestart/" + c.name;
}

std::string state_path(const Config& c, const std::string& name) { return state_dir(c) + "/" + name; }

}  // namespace fr::supervisor
