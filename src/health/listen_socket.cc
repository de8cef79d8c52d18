#include "health/listen_socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace fr::health {

fr::Result<ListenAddress> parse_listen(const std::string& listen) {
  auto bad = [&](const std::string& why) {
    return make_error(Errc::kInvalidArgument, "health listen address '" + listen + "': " + why);
  };
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return bad("expected host:port (or none)");
  ListenAddress a;
  a.host = listen.substr(0, colon);
  const std::string port = listen.substr(colon + 1);
  if (a.host.size() >= 2 && a.host.front() == '[' && a.host.back() == ']') a.host = a.host.substr(1, a.host.size() - 2);
  else if (a.host.find(':') != std::string::npos) return bad("an IPv6 address must be in brackets: [addr]:port");
  if (a.host.empty()) return bad("missing host");
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return bad("port '" + port + "' is not a number from 0 to 65535");
  a.port = std::stoi(port);
  if (a.port > 65535) return bad("port " + port + " is out of range (0 to 65535)");
  return a;
}

fr::Result<BoundSocket> bind_listen(const std::string& listen, int backlog) {
  FR_ASSIGN(ListenAddress a, parse_listen(listen));
  auto fail = [&](const std::string& why) {
    return make_error(Errc::kIo, "health listen address '" + listen + "': " + why);
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(a.port);
  if (int rc = getaddrinfo(a.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return fail(std::string("cannot resolve the host: ") + gai_strerror(rc));
  std::string why = "no usable address";
  BoundSocket out;
  for (auto* ai = res; ai; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd) {
      why = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    int yes = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      why = std::string("bind: ") + std::strerror(errno);
      continue;
    }
    if (::listen(fd.get(), backlog) != 0) {
      why = std::string("listen: ") + std::strerror(errno);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
      why = std::string("getsockname: ") + std::strerror(errno);
      continue;
    }
    out.family = ss.ss_family;
    out.port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    out.fd = std::move(fd);
    break;
  }
  freeaddrinfo(res);
  if (!out.fd) return fail(why);
  return out;
}

}  // namespace fr::health
