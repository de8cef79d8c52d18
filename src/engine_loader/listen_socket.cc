// The listening socket a supervisor handed down (fastrestart/listen_socket.h, docs/listen-socket.md).
// libsystemd's sd_listen_fds_with_names() reads the same variables; the engine loader does not link
// libsystemd (it is linked into engines), so the convention is read here.
#include "fastrestart/listen_socket.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace fastrestart {
namespace {

constexpr int kListenFdsStart = 3;  // SD_LISTEN_FDS_START

Error bad_env(const char* name, const std::string& value, const std::string& why) {
  return Error{Errc::kInvalidArgument, std::string(name) + "=" + value + ": " + why};
}

template <typename T>
bool parse_number(const std::string& s, T& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && end == s.data() + s.size();
}

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t colon = s.find(':', start);
    out.push_back(s.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
    if (colon == std::string::npos) return out;
    start = colon + 1;
  }
}

// Unsets the variables on every return path once they were looked at.
struct UnsetOnExit {
  ~UnsetOnExit() {
    ::unsetenv("LISTEN_PID");
    ::unsetenv("LISTEN_FDS");
    ::unsetenv("LISTEN_FDNAMES");
  }
};

}  // namespace

Result<int> inherited_listen_socket(std::string_view name) {
  const char* pid_env = std::getenv("LISTEN_PID");
  const char* fds_env = std::getenv("LISTEN_FDS");
  if (!pid_env && !fds_env) return -1;
  const std::string pid_text = pid_env ? pid_env : "", fds_text = fds_env ? fds_env : "";
  const char* names_env = std::getenv("LISTEN_FDNAMES");
  const std::string names_text = names_env ? names_env : "";
  const bool has_names = names_env != nullptr;
  UnsetOnExit unset;
  if (!pid_env || !fds_env) return -1;
  long pid = 0;
  if (!parse_number(pid_text, pid) || pid <= 0) return bad_env("LISTEN_PID", pid_text, "not a process id");
  if (pid != ::getpid()) return -1;  // meant for another process
  int count = 0;
  if (!parse_number(fds_text, count) || count < 0) return bad_env("LISTEN_FDS", fds_text, "not a descriptor count");
  if (count == 0) return -1;
  int index = 0;
  if (has_names) {
    const auto names = split_names(names_text);
    if (static_cast<int>(names.size()) != count)
      return bad_env("LISTEN_FDNAMES", names_text, std::to_string(names.size()) + " names for LISTEN_FDS=" + fds_text);
    if (!name.empty()) {
      index = -1;
      for (int i = 0; i < count; ++i)
        if (names[static_cast<size_t>(i)] == name) index = i;
      if (index < 0) return -1;
    }
  } else if (!name.empty() && count > 1) {
    return -1;
  }
  const int fd = kListenFdsStart + index;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return bad_env("LISTEN_FDS", fds_text, "descriptor " + std::to_string(fd) + " is not open (" + std::strerror(errno) + ")");
  int type = 0, accepting = 0;
  socklen_t len = sizeof type;
  if (!S_ISSOCK(st.st_mode) || ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
    return bad_env("LISTEN_FDS", fds_text, "descriptor " + std::to_string(fd) + " is not a stream socket");
  len = sizeof accepting;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || !accepting)
    return bad_env("LISTEN_FDS", fds_text, "descriptor " + std::to_string(fd) + " is not listening");
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags < 0 || ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0)
    return Error{Errc::kIo, "descriptor " + std::to_string(fd) + ": setting close-on-exec: " + std::strerror(errno)};
  return fd;
}

}  // namespace fastrestart
