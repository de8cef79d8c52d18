#include "supervisor/listen_socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>

namespace fr::supervisor {
namespace {

std::string address_text(const std::string& host, uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

Result<ListenSocket> ListenSocket::open(const std::string& host, uint16_t port, int backlog, const char* field_names) {
  const std::string where = address_text(host, port);
  const std::string fields = std::string(" (") + field_names + ")";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
    return make_error(Errc::kInvalidArgument, "cannot listen on " + where + fields + ": " + ::gai_strerror(rc));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(found, ::freeaddrinfo);
  int last_errno = 0;
  std::string last_step;
  for (addrinfo* ai = list.get(); ai; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd) {
      last_errno = errno, last_step = "socket";
      continue;
    }
    // Past TIME_WAIT of the last run's connections; a live listener still makes bind fail.
    int yes = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last_errno = errno, last_step = "bind";
      continue;
    }
    if (::listen(fd.get(), backlog) != 0) {
      last_errno = errno, last_step = "listen";
      continue;
    }
    ListenSocket s;
    struct stat st {};
    if (::fstat(fd.get(), &st) == 0) s.m_inode = st.st_ino;
    // The port as bound (port 0 picks one: tests).
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    uint16_t bound_port = port;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) == 0)
      bound_port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(bound).sin6_port
                                                     : reinterpret_cast<sockaddr_in&>(bound).sin_port);
    s.m_fd = std::move(fd);
    s.m_address = address_text(host, bound_port);
    s.m_port = bound_port;
    return s;
  }
  const std::string why = last_step + ": " + std::strerror(last_errno);
  if (last_errno == EADDRINUSE)
    return make_error(Errc::kBusy, "cannot listen on " + where + fields + ": " + why +
                                       ": another process listens there (an engine left running by hand, another "
                                       "server); stop it or change " + std::string(std::string_view(field_names).starts_with("front.") ? "front.upstream_port" : "engine.port"));
  return make_error(Errc::kIo, "cannot listen on " + where + fields + ": " + why);
}

}  // namespace fr::supervisor
