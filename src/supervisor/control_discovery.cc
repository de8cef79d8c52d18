#include "supervisor/control_discovery.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "common/unix_socket.h"

namespace fr::supervisor {

std::vector<std::string> control_socket_dirs() {
  std::vector<std::string> dirs = {"/run/fastrestart"};
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x) dirs.push_back(std::string(x) + "/fastrestart");
  dirs.push_back("/tmp/fastrestart-" + std::to_string(::geteuid()));
  std::vector<std::string> out;
  for (auto& d : dirs)
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(std::move(d));
  return out;
}

std::vector<std::string> live_control_sockets(const std::vector<std::string>& dirs) {
  std::vector<std::string> out;
  for (const auto& dir : dirs) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (e.path().extension() != ".ctl" || !e.is_socket(ec)) continue;
      // A socket file outlives a killed fastrestartd: only one that accepts is an instance.
      if (connect_unix(e.path().string(), deadline_in(1)).ok()) out.push_back(e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace fr::supervisor
