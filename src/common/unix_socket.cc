#include "common/unix_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <string>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

// Linux 6.5's names, absent from older C library headers.
#ifndef SO_PASSPIDFD
#define SO_PASSPIDFD 76
#endif
#ifndef SCM_PIDFD
#define SCM_PIDFD 0x04
#endif

namespace fr {
namespace {

constexpr int kMaxFds = 4;

Result<sockaddr_un> make_addr(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path))
    return make_error(Errc::kInvalidArgument, "socket path too long (" + std::to_string(path.size()) + " bytes): " + path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

// Waits until `fd` is ready for `events` or the deadline passes.
Status wait_fd(int fd, short events, Deadline deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return make_error(Errc::kTimeout, "timed out waiting for the peer");
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
    if (r < 0) {
      if (errno == EINTR) continue;
      return sys_error("poll");
    }
    if (r > 0) return {};
  }
}

}  // namespace

Result<UniqueFd> listen_unix(const std::string& path, mode_t mode) {
  FR_ASSIGN(sockaddr_un a, make_addr(path));
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) return sys_error("socket");
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return sys_error("bind " + path);
  if (::chmod(path.c_str(), mode) != 0) return sys_error("chmod " + path);
  if (::listen(s.get(), 128) != 0) return sys_error("listen " + path);
  return s;
}

Result<UniqueFd> connect_unix(const std::string& path, Deadline deadline) {
  FR_ASSIGN(sockaddr_un a, make_addr(path));
  for (;;) {
    UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s) return sys_error("socket");
    if (::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return s;
    int err = errno;
    if (err == EACCES || err == EPERM)
      return make_error(Errc::kPermissionDenied, "connect " + path + ": " + std::strerror(err));
    bool retry = err == ENOENT || err == ECONNREFUSED || err == EAGAIN || err == EINTR;
    if (!retry || Clock::now() >= deadline) {
      Errc c = err == ENOENT ? Errc::kNotFound : (retry ? Errc::kTimeout : Errc::kIo);
      return make_error(c, "connect " + path + ": " + std::strerror(err) +
                               (err == ENOENT ? " (no daemon is listening there)" : ""));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Result<PeerCred> peer_cred(int sock) {
  ucred c{};
  socklen_t len = sizeof c;
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &c, &len) != 0) return sys_error("SO_PEERCRED");
  return PeerCred{c.pid, c.uid, c.gid};
}

bool peer_in_group(const PeerCred& peer, gid_t gid) {
  if (peer.gid == gid) return true;
  std::ifstream f("/proc/" + std::to_string(peer.pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Groups:", 0) != 0) continue;
    std::istringstream in(line.substr(7));
    long g;
    while (in >> g)
      if (static_cast<gid_t>(g) == gid) return true;
  }
  return false;
}

Status send_all(int sock, const void* data, size_t n, const std::vector<int>& fds, Deadline deadline) {
  if (fds.size() > kMaxFds) return make_error(Errc::kInternal, "too many descriptors in one frame");
  const auto* p = static_cast<const char*>(data);
  bool first = true;
  while (n > 0) {
    iovec iov{const_cast<char*>(p), n};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
    if (first && !fds.empty()) {
      std::memset(cbuf, 0, sizeof cbuf);
      m.msg_control = cbuf;
      m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    ssize_t r = ::sendmsg(sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        FR_TRY(wait_fd(sock, POLLOUT, deadline));
        continue;
      }
      return sys_error("send");
    }
    first = false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return {};
}

Status recv_exact(int sock, void* data, size_t n, std::vector<UniqueFd>* fds, Deadline deadline) {
  auto* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < n) {
    auto r = recv_some(sock, p + got, n - got, fds, deadline);
    if (!r.ok()) {
      if (r.error().code == Errc::kCancelled && got > 0)
        return make_error(Errc::kProtocol, "peer closed the connection in the middle of a frame");
      return r.error();
    }
    got += *r;
  }
  return {};
}

Result<size_t> recv_some(int sock, void* data, size_t n, std::vector<UniqueFd>* fds, Deadline deadline) {
  return recv_some(sock, data, n, fds, deadline, nullptr);
}

Result<bool> pass_sender_credentials(int sock) {
  int on = 1;
  if (::setsockopt(sock, SOL_SOCKET, SO_PASSCRED, &on, sizeof on) != 0) return sys_error("setsockopt(SO_PASSCRED)");
  return ::setsockopt(sock, SOL_SOCKET, SO_PASSPIDFD, &on, sizeof on) == 0;
}

Result<pid_t> pidfd_pid(int pidfd) {
  std::ifstream in("/proc/self/fdinfo/" + std::to_string(pidfd));
  if (!in) return sys_error("/proc/self/fdinfo/" + std::to_string(pidfd));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Pid:", 0) == 0) return static_cast<pid_t>(std::stol(line.substr(4)));
  return make_error(Errc::kUnsupported, "/proc/self/fdinfo/" + std::to_string(pidfd) + ": no Pid line (not a pidfd)");
}

Result<size_t> recv_some(int sock, void* data, size_t n, std::vector<UniqueFd>* fds, Deadline deadline,
                         MessageSender* sender) {
  auto* p = static_cast<char*>(data);
  for (;;) {
    FR_TRY(wait_fd(sock, POLLIN, deadline));
    iovec iov{p, n};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    // Room for the descriptors, the credentials and the sender's pidfd.
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds) + CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int))];
    m.msg_control = cbuf;
    m.msg_controllen = sizeof cbuf;
    ssize_t r = ::recvmsg(sock, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return sys_error("recv");
    }
    if (sender) *sender = MessageSender{};
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
      if (c->cmsg_level != SOL_SOCKET) continue;
      if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(ucred))) {
        ucred u{};
        std::memcpy(&u, CMSG_DATA(c), sizeof u);
        if (sender) sender->has_cred = true, sender->pid = u.pid, sender->uid = u.uid, sender->gid = u.gid;
        continue;
      }
      if (c->cmsg_type == SCM_PIDFD && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
        UniqueFd owned(fd >= 0 ? fd : -1);  // a negative value is the kernel's error: no process to name
        if (sender) sender->has_pidfd = true, sender->pidfd = std::move(owned);
        continue;
      }
      if (c->cmsg_type != SCM_RIGHTS) continue;
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        if (fds) fds->emplace_back(fd); else ::close(fd);
      }
    }
    if (m.msg_flags & MSG_CTRUNC) return make_error(Errc::kProtocol, "too many file descriptors in one frame");
    if (r == 0) return make_error(Errc::kCancelled, "peer closed the connection");
    return static_cast<size_t>(r);
  }
}

}  // namespace fr
