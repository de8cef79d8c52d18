// The listening socket a supervisor handed down (fastrestart/listen_socket.h, docs/listen-socket.md).
// libsystemd's sd_listen_fds_with_names() reads the same variables; the engine loader does not link
// libsystemd (it is linked into engines), so the convention is read here.
#include "fastrestart/listen_socket.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/parse_number.h"

namespace fastrestart {
namespace {

constexpr int kListenFdsStart = 3;  // SD_LISTEN_FDS_START

using fr::bad_env;
using fr::parse_env_int;

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

const char* family_name(int family) {
  switch (family) {
    case AF_INET: return "IPv4 (AF_INET)";
    case AF_INET6: return "IPv6 (AF_INET6)";
    case AF_UNIX: return "Unix (AF_UNIX)";
    case AF_NETLINK: return "netlink (AF_NETLINK)";
    case AF_PACKET: return "packet (AF_PACKET)";
    default: return nullptr;
  }
}

const char* type_name(int type) {
  switch (type) {
    case SOCK_STREAM: return "stream";
    case SOCK_DGRAM: return "datagram";
    case SOCK_SEQPACKET: return "seqpacket";
    case SOCK_RAW: return "raw";
    default: return "other";
  }
}

const char* file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a pipe";
  if (S_ISLNK(mode)) return "a symlink";
  return "not a socket";
}

// Empty when `fd` is a listening TCP socket (IPv4 or IPv6), else one sentence naming what it is instead:
// "descriptor 3 is a listening Unix (AF_UNIX) stream socket, not a listening TCP socket".
std::string not_a_tcp_listener(int fd) {
  const std::string d = "descriptor " + std::to_string(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return d + " is not open (" + std::strerror(errno) + ")";
  if (!S_ISSOCK(st.st_mode)) return d + " is " + file_kind(st.st_mode) + ", not a listening TCP socket";
  int family = 0, type = 0, protocol = 0, accepting = 0;
  socklen_t len = sizeof family;
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &family, &len) != 0) return d + ": SO_DOMAIN: " + std::strerror(errno);
  len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) return d + ": SO_TYPE: " + std::strerror(errno);
  len = sizeof protocol;
  if (::getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0) protocol = -1;
  len = sizeof accepting;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0) accepting = 0;
  const bool tcp = (family == AF_INET || family == AF_INET6) && type == SOCK_STREAM && protocol == IPPROTO_TCP;
  if (tcp && accepting) return {};
  const char* fam = family_name(family);
  std::string what = (accepting ? "a listening " : "a non-listening ") + (fam ? std::string(fam) : "family " + std::to_string(family));
  if (family == AF_INET || family == AF_INET6)
    what += protocol == IPPROTO_TCP ? " TCP" : protocol == IPPROTO_UDP ? " UDP" : " protocol " + std::to_string(protocol);
  return d + " is " + what + " " + type_name(type) + " socket, not a listening TCP socket";
}

// One line on the process's standard error: the library has no logger (engines capture fd 2).
void say_line(const std::string& line) {
  const std::string out = line + "\n";
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::write(2, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
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

// The checks of one passed descriptor: a listening TCP socket (IPv4 or IPv6); then close-on-exec.
Result<int> checked(int fd, const std::string& fds_text) {
  if (auto why = not_a_tcp_listener(fd); !why.empty()) return bad_env("LISTEN_FDS", fds_text, why);
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
  FR_ASSIGN(const int64_t pid, parse_env_int<int64_t>("LISTEN_PID", pid_text, 1, INT64_MAX, "not a process id"));
  if (pid != ::getpid()) {
    // Meant for another process (systemd's rule: not ours). Said in one line, since with fastrestartd it
    // is nearly always a wrapper between it and the engine that forks instead of exec'ing, and the engine
    // would next bind the port itself and fail with "address in use".
    if (fds_text != "0")
      say_line("fastrestart: LISTEN_PID=" + pid_text + " is not this process (pid " + std::to_string(::getpid()) +
               "): the passed socket (LISTEN_FDS) is another process's; not using it (a wrapper "
               "between the supervisor and the engine must exec it, not fork)");
    return out;
  }
  FR_ASSIGN(const int count, parse_env_int<int>("LISTEN_FDS", fds_text, 0, INT_MAX, "not a descriptor count"));
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
