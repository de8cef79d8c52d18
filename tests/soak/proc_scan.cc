#include "soak/proc_scan.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
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

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

// The inodes of the sockets listening on `port`, as /proc/<pid>/fd links name them ("socket:[N]").
std::set<std::string> listening_inodes(uint16_t port) {
  // "sl local_address rem_address st ... inode": local "HEX_ADDR:HEX_PORT", st 0A is LISTEN.
  std::set<std::string> inodes;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream in(read_all(table));
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream w(line);
      std::string sl, local, remote, st, queues, timer, retr, uid, timeout, inode;
      if (!(w >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >> inode)) continue;
      const auto colon = local.rfind(':');
      if (st != "0A" || colon == std::string::npos) continue;
      if (std::strtoul(local.c_str() + colon + 1, nullptr, 16) == port) inodes.insert("socket:[" + inode + "]");
    }
  }
  return inodes;
}

}  // namespace

int listening_sockets(uint16_t port) { return static_cast<int>(listening_inodes(port).size()); }

std::vector<pid_t> listening_pids(uint16_t port, int* sockets) {
  const std::set<std::string> inodes = listening_inodes(port);
  if (sockets) *sockets = static_cast<int>(inodes.size());
  std::vector<pid_t> out;
  if (inodes.empty()) return out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    const std::string dir = "/proc/" + std::string(e->d_name) + "/fd";
    DIR* fds = ::opendir(dir.c_str());
    if (!fds) continue;
    bool holds = false;
    while (dirent* f = ::readdir(fds)) {
      if (f->d_name[0] == '.') continue;
      char target[64];
      const ssize_t n = ::readlink((dir + "/" + f->d_name).c_str(), target, sizeof target - 1);
      if (n > 0 && inodes.count(std::string(target, static_cast<size_t>(n)))) holds = true;
    }
    ::closedir(fds);
    if (holds) out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return out;
}

bool started_with_env(pid_t pid, const std::string& name) {
  const std::string env = read_all("/proc/" + std::to_string(pid) + "/environ");
  const std::string want = name + "=";
  for (size_t at = 0; at < env.size();) {
    const size_t end = env.find('\0', at);
    if (env.compare(at, want.size(), want) == 0) return true;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return false;
}

std::string cmdline(pid_t pid) { return read_all("/proc/" + std::to_string(pid) + "/cmdline"); }

}  // namespace fr::soak
