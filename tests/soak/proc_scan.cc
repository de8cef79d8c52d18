#include "soak/proc_scan.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace fr::soak {

ProcInfo proc_info(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return {};
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
  auto open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 4 > line.size()) return {};
  ProcInfo p;
  p.pid = pid;
  p.comm = line.substr(open + 1, close - open - 1);
  std::istringstream rest(line.substr(close + 2));
  rest >> p.state >> p.ppid;
  return p;
}

std::vector<ProcInfo> children_of(pid_t ppid) {
  std::vector<ProcInfo> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    ProcInfo p = proc_info(static_cast<pid_t>(pid));
    if (p.pid != 0 && p.ppid == ppid) out.push_back(p);
  }
  ::closedir(d);
  return out;
}

int fd_count(pid_t pid) {
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (!d) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n;
}

long rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  return -1;
}

bool running(pid_t pid) {
  ProcInfo p = proc_info(pid);
  return p.pid != 0 && p.state != 'Z';
}

int reap_children(pid_t keep) {
  int n = 0;
  for (const auto& c : children_of(::getpid()))
    if (c.state == 'Z' && c.pid != keep && ::waitpid(c.pid, nullptr, WNOHANG) == c.pid) ++n;
  return n;
}

}  // namespace fr::soak
