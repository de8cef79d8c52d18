#include "supervisor/private_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include "supervisor/child.h"
#include "supervisor/config.h"
#include "supervisor/engine.h"

namespace fr::supervisor {
namespace {

// Only fastrestartd connects, one probe at a time; a few more for probes a timeout left behind.
constexpr int kBacklog = 16;

Error io_error(const char* step) {
  return Error{Errc::kIo, std::string("the engine's private endpoint: ") + step + ": " + std::strerror(errno)};
}

}  // namespace

Result<PrivateEndpoint> open_private_endpoint() {
  PrivateEndpoint e;
  e.fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!e.fd) return io_error("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(e.fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return io_error("bind 127.0.0.1:0");
  if (::listen(e.fd.get(), kBacklog) != 0) return io_error("listen");
  socklen_t len = sizeof a;
  if (::getsockname(e.fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) return io_error("getsockname");
  e.port = ntohs(a.sin_port);
  return e;
}

UniqueFd prepare_private_endpoint(const Config& cfg, SpawnSpec& spec, Engine& e) {
  e.probe_port = 0;
  e.endpoint_note = "public";
  if (cfg.readiness.endpoint != ReadinessEndpoint::kPrivate || spec.listen_fd < 0) return {};
  if (spec.new_pid_namespace) {
    e.endpoint_note = "public (a snapshottable engine gets no private endpoint)";
    return {};
  }
  auto opened = open_private_endpoint();
  if (!opened) {
    spdlog::warn("{}: the checks of this engine go to the public port", opened.error().message);
    e.endpoint_note = "public (" + opened.error().message + ")";
    return {};
  }
  spec.probe_fd = opened->fd.get();
  spec.probe_fd_name = kProbeFdName;
  e.probe_port = opened->port;
  e.endpoint_note = std::string("private ") + kProbeHost + ":" + std::to_string(opened->port);
  return std::move(opened->fd);
}

}  // namespace fr::supervisor
