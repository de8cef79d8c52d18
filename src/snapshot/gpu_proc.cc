#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "snapshot/gpu.h"

namespace fr::snapshot {

std::vector<pid_t> process_tree(pid_t root) {
  std::vector<pid_t> out{root};
  for (size_t i = 0; i < out.size(); ++i) {
    const std::string tasks = "/proc/" + std::to_string(out[i]) + "/task";
    DIR* d = ::opendir(tasks.c_str());
    if (!d) continue;
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream f(tasks + "/" + e->d_name + "/children");
      for (pid_t c; f >> c;) out.push_back(c);
    }
    ::closedir(d);
  }
  return out;
}

bool holds_gpu(pid_t pid) {
  const std::string base = "/proc/" + std::to_string(pid);
  std::ifstream maps(base + "/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find("/dev/nvidia") != std::string::npos) return true;
  DIR* d = ::opendir((base + "/fd").c_str());
  if (!d) return false;
  bool found = false;
  char target[256];
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    ssize_t n = ::readlinkat(::dirfd(d), e->d_name, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = 0;
    if (std::string(target).rfind("/dev/nvidia", 0) == 0) {
      found = true;
      break;
    }
  }
  ::closedir(d);
  return found;
}

}  // namespace fr::snapshot
