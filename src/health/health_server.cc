#include "health/health_server.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <thread>
#include <utility>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "health/probes.h"

#ifndef FASTRESTART_VERSION
#define FASTRESTART_VERSION "unknown"
#endif

namespace fr::health {
namespace {

using nlohmann::json;

struct Address {
  std::string host;
  int port = 0;
};

// "host:port" or "[v6]:port"; the port is 0..65535 in decimal.
fr::Result<Address> parse_listen(const std::string& listen) {
  auto bad = [&](const std::string& why) {
    return make_error(Errc::kInvalidArgument, "health listen address '" + listen + "': " + why);
  };
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return bad("expected host:port (or none)");
  Address a;
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

// httplib reports only that binding failed; redo the steps to name why (resolution, or the errno of bind).
std::string why_bind_failed(const Address& a) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(a.port);
  if (int rc = getaddrinfo(a.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return std::string("cannot resolve the host: ") + gai_strerror(rc);
  std::string why = "cannot bind";
  for (auto* ai = res; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      why = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) why = std::string("bind: ") + std::strerror(errno);
    else if (::listen(fd, 1) != 0) why = std::string("listen: ") + std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(res);
  return why;
}

// Status strings can carry raw bytes from a child's output; replace invalid UTF-8 instead of throwing.
std::string dump(const json& j, int indent = -1) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace) + "\n";
}

void reply_json(httplib::Response& res, int code, const json& body) {
  res.status = code;
  res.set_content(dump(body), "application/json");
}

}  // namespace

struct HealthServer::Impl {
  Source source;
  httplib::Server server;
  std::thread thread;
  std::atomic<bool> exited{false};  // set by the listener thread when listen_after_bind returns
  uint16_t port = 0;

  // The status, or null when the supervisor does not answer (the callback threw or returned null).
  json status(std::string* error) {
    try {
      if (!source.status) throw std::runtime_error("no status source");
      json j = source.status();
      if (j.is_null()) *error = "the supervisor returned no status";
      return j;
    } catch (const std::exception& e) {
      *error = e.what();
    } catch (...) {
      *error = "unknown error";
    }
    return nullptr;
  }

  void routes() {
    server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      std::string err;
      json j = status(&err);
      auto a = health_probe(j);
      if (!err.empty()) a.body["error"] = err;
      reply_json(res, a.code, a.body);
    });
    server.Get("/ready", [this](const httplib::Request&, httplib::Response& res) {
      std::string err;
      json j = status(&err);
      auto a = ready_probe(j);
      if (!err.empty()) a.body["error"] = err;
      reply_json(res, a.code, a.body);
    });
    server.Get("/status", [this](const httplib::Request&, httplib::Response& res) {
      std::string err;
      json j = status(&err);
      if (j.is_null()) return reply_json(res, 503, {{"error", err}});
      res.status = 200;
      res.set_content(dump(j, 2), "application/json");
    });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::string err;
      json j = status(&err);
      if (j.is_null()) spdlog::debug("health: /metrics without a status: {}", err);
      res.status = 200;
      res.set_content(render_metrics(j, FASTRESTART_VERSION), "text/plain; version=0.0.4; charset=utf-8");
    });
    // Unknown paths and methods: a JSON 404 (405 bodies too). Called for every status >= 400, so only
    // fill in a body nobody set.
    server.set_error_handler(httplib::Server::HandlerWithResponse(
        [](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          reply_json(res, res.status,
                     {{"error", res.status == 404 ? "not found" : "error"}, {"path", req.path.substr(0, 256)}});
          return httplib::Server::HandlerResponse::Handled;
        }));
    server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      reply_json(res, 500, {{"error", "internal error"}});
    });
  }
};

fr::Result<std::unique_ptr<HealthServer>> HealthServer::start(const std::string& listen, Source source) {
  FR_ASSIGN(Address a, parse_listen(listen));
  auto impl = std::make_unique<Impl>();
  impl->source = std::move(source);
  // A probe endpoint needs few workers; short timeouts bound how long the destructor waits on idle
  // keep-alive connections.
  impl->server.new_task_queue = [] { return new httplib::ThreadPool(2); };
  impl->server.set_keep_alive_timeout(1);
  impl->server.set_read_timeout(2, 0);
  impl->server.set_write_timeout(2, 0);
  // httplib's default socket options add SO_REUSEPORT, which would let a second fastrestartd share the port
  // silently; keep only SO_REUSEADDR so a taken port is a bind error.
  impl->server.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  impl->routes();
  const int port = a.port == 0 ? impl->server.bind_to_any_port(a.host)
                               : (impl->server.bind_to_port(a.host, a.port) ? a.port : -1);
  if (port <= 0)
    return make_error(Errc::kIo, "health listen address '" + listen + "': " + why_bind_failed(a));
  impl->port = static_cast<uint16_t>(port);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    if (!raw->server.listen_after_bind()) spdlog::error("health: the listener stopped with an error");
    raw->exited = true;
  });
  // httplib's stop() is a no-op until the accept loop runs; wait for it so the destructor can always stop.
  while (!impl->server.is_running() && !impl->exited) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  spdlog::info("health: listening on {}:{}", a.host, impl->port);
  return std::unique_ptr<HealthServer>(new HealthServer(std::move(impl)));
}

HealthServer::HealthServer(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}

uint16_t HealthServer::port() const { return m_impl->port; }

HealthServer::~HealthServer() {
  m_impl->server.stop();
  if (m_impl->thread.joinable()) m_impl->thread.join();
}

}  // namespace fr::health
