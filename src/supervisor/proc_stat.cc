#include "supervisor/proc_stat.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "common/io.h"

namespace fr::supervisor {

std::optional<ProcStat> read_proc_stat(pid_t pid) {
  auto text = read_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!text.ok()) return std::nullopt;
  // comm may hold spaces and parentheses: it ends at the last ')'.
  const size_t open = text->find('('), close = text->rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  ProcStat s;
  s.pid = pid;
  s.comm = text->substr(open + 1, close - open - 1);
  std::istringstream rest(text->substr(close + 1));
  std::string field;
  // Fields 3.. follow; field 22 is the 20th of them.
  for (int n = 3; n <= 22 && rest >> field; ++n) {
    if (n == 3) s.state = field.empty() ? '?' : field[0];
    else if (n == 4) s.ppid = static_cast<pid_t>(std::strtol(field.c_str(), nullptr, 10));
    else if (n == 5) s.pgid = static_cast<pid_t>(std::strtol(field.c_str(), nullptr, 10));
    else if (n == 22) {
      s.start_time = std::strtoull(field.c_str(), nullptr, 10);
      return s;
    }
  }
  return std::nullopt;  // truncated
}

std::string read_cmdline(pid_t pid, size_t max) {
  auto text = read_file("/proc/" + std::to_string(pid) + "/cmdline", 1 << 20);
  if (!text.ok()) return "";
  std::string s = text->substr(0, max);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  for (auto& c : s)
    if (c == '\0') c = ' ';
  return s;
}

std::vector<pid_t> list_pids() {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid > 0 && end && *end == '\0') out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return out;
}

bool proc_matches_pid_namespace() {
  char buf[32] = {0};
  const ssize_t n = ::readlink("/proc/self", buf, sizeof buf - 1);
  return n > 0 && std::atol(buf) == static_cast<long>(::getpid());
}

}  // namespace fr::supervisor
