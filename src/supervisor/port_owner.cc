#include "supervisor/port_owner.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "supervisor/proc_stat.h"

namespace fr::supervisor {
namespace {

constexpr const char* kListen = "0A";  // TCP_LISTEN in /proc/net/tcp's "st" column

std::string read_all(const char* path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::set<uint64_t> listening_inodes(const std::string& text, uint16_t port) {
  std::set<uint64_t> out;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
    std::istringstream f(line);
    std::string sl, local, remote, st, queues, timer, retr, uid, timeout, inode;
    if (!(f >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >> inode)) continue;
    if (st != kListen) continue;
    const auto colon = local.rfind(':');
    if (colon == std::string::npos) continue;
    unsigned long p = 0, ino = 0;
    try {
      p = std::stoul(local.substr(colon + 1), nullptr, 16);
      ino = std::stoul(inode);
    } catch (...) {
      continue;
    }
    if (p == port && ino != 0) out.insert(ino);
  }
  return out;
}

namespace {

std::set<uint64_t> inodes_listening_on(uint16_t port) {
  std::set<uint64_t> inodes = listening_inodes(read_all("/proc/net/tcp"), port);
  for (uint64_t i : listening_inodes(read_all("/proc/net/tcp6"), port)) inodes.insert(i);
  return inodes;
}

// The first process (a member of group `pgid`, or any when 0) that holds one of the socket `inodes` open.
pid_t holder_of(const std::set<uint64_t>& inodes, pid_t pgid) {
  for (pid_t pid : list_pids()) {
    if (pgid > 0) {
      auto st = read_proc_stat(pid);
      if (!st || st->pgid != pgid) continue;
    }
    const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
    if (!d) continue;
    while (dirent* e = ::readdir(d.get())) {
      char target[64];
      const std::string link = dir + "/" + e->d_name;
      const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      unsigned long ino = 0;
      if (std::sscanf(target, "socket:[%lu]", &ino) == 1 && inodes.count(ino)) return pid;
    }
  }
  return 0;
}

}  // namespace

pid_t group_listener(pid_t pgid, uint16_t port, uint64_t ours) {
  if (pgid <= 0) return 0;
  std::set<uint64_t> inodes = inodes_listening_on(port);
  inodes.erase(ours);
  return inodes.empty() ? 0 : holder_of(inodes, pgid);
}

pid_t port_listener(uint16_t port, bool* listening) {
  const std::set<uint64_t> inodes = inodes_listening_on(port);
  if (listening) *listening = !inodes.empty();
  return inodes.empty() ? 0 : holder_of(inodes, 0);
}

}  // namespace fr::supervisor
