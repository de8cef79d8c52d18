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
#include <initializer_list>
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

namespace {

// The checks of one passed descriptor: open, a stream socket, listening; then close-on-exec.
Result<int> checked(int fd, const std::string& fds_text) {
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

// The descriptor of each of `names` (-1: not passed to this process). Without LISTEN_FDNAMES only the first
// name can be told apart (fd 3, when one descriptor was passed or the name is empty). The variables are
// removed once looked at.
Result<std::vector<int>> take_sockets(std::initializer_list<std::string_view> names) {
  std::vector<int> out(names.size(), -1);
  const char* pid_env = std::getenv("LISTEN_PID");
  const char* fds_env = std::getenv("LISTEN_FDS");
  if (!pid_env && !fds_env) return out;
  const std::string pid_text = pid_env ? pid_env : "", fds_text = fds_env ? fds_env : "";
  const char* names_env = std::getenv("LISTEN_FDNAMES");
  const std::string names_text = names_env ? names_env : "";
  const bool has_names = names_env != nullptr;
  UnsetOnExit unset;
  if (!pid_env || !fds_env) return out;
  long pid = 0;
  if (!parse_number(pid_text, pid) || pid <= 0) return bad_env("LISTEN_PID", pid_text, "not a process id");
  if (pid != ::getpid()) return out;  // meant for another process
  int count = 0;
  if (!parse_number(fds_text, count) || count < 0) return bad_env("LISTEN_FDS", fds_text, "not a descriptor count");
  if (count == 0) return out;
  std::vector<int> index(names.size(), -1);
  if (has_names) {
    const auto passed = split_names(names_text);
    if (static_cast<int>(passed.size()) != count)
      return bad_env("LISTEN_FDNAMES", names_text, std::to_string(passed.size()) + " names for LISTEN_FDS=" + fds_text);
    size_t k = 0;
    for (std::string_view name : names) {
      if (name.empty()) index[k] = 0;
      for (int i = 0; i < count && !name.empty(); ++i)
        if (passed[static_cast<size_t>(i)] == name) index[k] = i;
      ++k;
    }
  } else if (names.begin()->empty() || count == 1) {
    index[0] = 0;
  }
  for (size_t k = 0; k < names.size(); ++k) {
    if (index[k] < 0) continue;
    auto fd = checked(kListenFdsStart + index[k], fds_text);
    if (!fd) return fd.error();
    out[k] = *fd;
  }
  return out;
}

}  // namespace

Result<int> inherited_listen_socket(std::string_view name) {
  auto fds = take_sockets({name});
  if (!fds) return fds.error();
  return (*fds)[0];
}

Result<InheritedSockets> inherited_listen_sockets() {
  auto fds = take_sockets({kListenFdName, kProbeFdName});
  if (!fds) return fds.error();
  return InheritedSockets{(*fds)[0], (*fds)[1]};
}

}  // namespace fastrestart
