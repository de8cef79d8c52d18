#include "health/health_server.h"

#include <microhttpd.h>
#include <sys/socket.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "health/listen_socket.h"
#include "health/probes.h"

#ifndef FASTRESTART_VERSION
#define FASTRESTART_VERSION "unknown"
#endif

namespace fr::health {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Status strings can carry raw bytes from a child's output; replace invalid UTF-8 instead of throwing.
std::string dump(const json& j, int indent = -1) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace) + "\n";
}

// One status fetch: the JSON, or null and why.
struct Snapshot {
  json status;
  std::string error;
  Clock::time_point taken;
};

// Per request (MHD's con_cls): whether it has asked for a status yet, and which fetch answers it.
struct Request {
  bool asked = false;
  uint64_t generation = 0;
  Clock::time_point since;
};

// Per connection, from its accept to its close: what the connection limit and the request deadline act on.
struct Conn {
  int fd = -1;
  uint64_t seq = 0;          // accept order: the tie-break between connections accepted in the same instant
  Clock::time_point since;   // its accept, or the end of its previous answer (keep-alive)
  bool answering = false;    // its request is complete: parked for a status or its answer being sent
  bool parked = false;       // suspended: libmicrohttpd does not look at it until it is resumed
  bool closing = false;      // shut down by the server; gone once libmicrohttpd sees it
};

// libmicrohttpd closes a connection the server has shut down on its next pass over the sockets, and
// accepts at most 10 connections a pass: this many slots beyond connection_limit keep its own limit (which
// refuses a new connection, a probe as well) from being reached while evicted connections are closing.
constexpr unsigned kClosingHeadroom = 64;

enum MHD_Result reply(MHD_Connection* c, unsigned code, const std::string& body, const char* type) {
  MHD_Response* r = MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (code == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  const enum MHD_Result ok = MHD_queue_response(c, code, r);
  MHD_destroy_response(r);
  return ok;
}

enum MHD_Result reply_json(MHD_Connection* c, unsigned code, const json& body) {
  return reply(c, code, dump(body), "application/json");
}

void on_log(void*, const char* fmt, va_list ap);

bool is_endpoint(const std::string& url) {
  return url == "/health" || url == "/ready" || url == "/status" || url == "/metrics";
}

}  // namespace

struct HealthServer::Impl {
  Source source;
  Options options;
  MHD_Daemon* daemon = nullptr;
  uint16_t port = 0;

  std::mutex mutex;
  std::condition_variable wake;                        // the fetcher: a request asks; the sweeper: one waits
  std::shared_ptr<const Snapshot> last;                // the newest fetch (null before the first)
  uint64_t asked = 0;                                  // generation of the newest request
  uint64_t fetched = 0;                                // generation the newest fetch answers
  std::vector<std::pair<MHD_Connection*, Request*>> parked;  // suspended until `fetched` reaches theirs
  std::unordered_map<MHD_Connection*, Conn> conns;     // every connection libmicrohttpd holds
  size_t live = 0;                                     // of those, the ones not shut down
  uint64_t accepted = 0;
  bool stopping = false;
  std::thread fetcher;
  std::thread sweeper;

  ~Impl() { stop(); }

  // Called with `mutex` held: resumes the parked requests `done` says are answerable.
  template <class Done>
  void resume_locked(Done done) {
    std::erase_if(parked, [&](const auto& p) {
      if (!done(*p.second)) return false;
      if (auto it = conns.find(p.first); it != conns.end()) it->second.parked = false;
      MHD_resume_connection(p.first);
      return true;
    });
  }

  void fetch_loop() {
    std::unique_lock lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return stopping || asked > fetched; });
      if (stopping) return;
      const uint64_t generation = asked;
      lock.unlock();
      auto snap = std::make_shared<Snapshot>();
      try {
        if (!source.status) throw std::runtime_error("no status source");
        snap->status = source.status();
        if (snap->status.is_null()) snap->error = "the supervisor returned no status";
      } catch (const std::exception& e) {
        snap->status = nullptr;
        snap->error = e.what();
      } catch (...) {
        snap->status = nullptr;
        snap->error = "unknown error";
      }
      snap->taken = Clock::now();
      lock.lock();
      last = std::move(snap);
      fetched = generation;
      resume_locked([&](const Request& r) { return r.generation <= fetched; });
      wake.notify_all();
    }
  }

  // Shuts a connection down, with `mutex` held. libmicrohttpd reads the end of file on its thread and
  // closes it there; the fd is still open now, since its close notification (which erases it from `conns`
  // under the same mutex) comes before libmicrohttpd closes the fd.
  void close_locked(Conn& conn) {
    ::shutdown(conn.fd, SHUT_RDWR);
    conn.closing = true;
    --live;
  }

  // Called with `mutex` held, beyond the connection limit: closes the oldest connection not being answered
  // (waiting for its request, or idle between requests), else the oldest whose answer is being sent.
  // Parked connections are left alone: each is answered within answer_deadline_s.
  void evict_one_locked(MHD_Connection* newest) {
    Conn* victim = nullptr;
    for (auto& [c, conn] : conns) {
      if (c == newest || conn.closing || conn.parked) continue;
      if (!victim || std::tie(conn.answering, conn.since, conn.seq) < std::tie(victim->answering, victim->since, victim->seq))
        victim = &conn;
    }
    if (!victim) return;
    spdlog::debug("health: {} connections: closing the oldest {}", live, victim->answering ? "slow reader" : "unanswered one");
    close_locked(*victim);
  }

  // Answers requests the fetcher has not served within the answer deadline (it is stuck in Source::status),
  // and closes connections past the request deadline.
  void sweep_loop() {
    const auto answer_deadline = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.answer_deadline_s));
    const auto request_deadline = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.request_deadline_s));
    std::unique_lock lock(mutex);
    while (!stopping) {
      const auto now = Clock::now();
      resume_locked([&](const Request& r) { return now - r.since >= answer_deadline; });
      auto next = now + std::chrono::hours(1);
      for (auto& [c, conn] : conns) {
        if (conn.closing || conn.parked) continue;
        if (now - conn.since >= request_deadline) {
          spdlog::debug("health: a connection past the request deadline ({:g} s): closed", options.request_deadline_s);
          close_locked(conn);
        } else {
          next = std::min(next, conn.since + request_deadline);
        }
      }
      if (!parked.empty()) next = std::min(next, now + std::chrono::milliseconds(50));
      wake.wait_until(lock, next);
    }
  }

  // The status that answers `r`: the fetch it asked for, or after the deadline the last one if young enough.
  Snapshot answer_for(const Request& r) {
    std::lock_guard lock(mutex);
    if (last && (fetched >= r.generation ||
                 Clock::now() - last->taken <= std::chrono::duration<double>(options.max_age_s)))
      return *last;
    Snapshot none;
    none.status = nullptr;
    none.error = "no status from the supervisor within " + fmt::format("{:g}", options.answer_deadline_s) + " s";
    return none;
  }

  enum MHD_Result handle(MHD_Connection* c, const std::string& url, const std::string& method,
                         size_t* upload_size, void** con_cls) {
    if (!*con_cls) {  // the headers are in; the next call has the body (if any) or is the last
      *con_cls = new Request;
      return MHD_YES;
    }
    auto* r = static_cast<Request*>(*con_cls);
    if (*upload_size != 0) {  // nothing here takes a body: drop it
      *upload_size = 0;
      return MHD_YES;
    }
    const std::string path = url.substr(0, 256);
    if (!is_endpoint(url)) return reply_json(c, MHD_HTTP_NOT_FOUND, {{"error", "not found"}, {"path", path}});
    if (method != MHD_HTTP_METHOD_GET && method != MHD_HTTP_METHOD_HEAD)
      return reply_json(c, MHD_HTTP_METHOD_NOT_ALLOWED, {{"error", "method not allowed"}, {"path", path}});
    if (!r->asked) {
      std::lock_guard lock(mutex);
      if (stopping) return reply_json(c, MHD_HTTP_SERVICE_UNAVAILABLE, {{"error", "shutting down"}});
      r->asked = true;
      r->generation = ++asked;
      r->since = Clock::now();
      if (auto it = conns.find(c); it != conns.end()) it->second.answering = it->second.parked = true;
      parked.emplace_back(c, r);
      MHD_suspend_connection(c);  // under the lock: no resume can come before it
      wake.notify_all();
      return MHD_YES;
    }
    const Snapshot snap = answer_for(*r);
    const json& j = snap.status;
    if (url == "/health" || url == "/ready") {
      auto a = url == "/health" ? health_probe(j) : ready_probe(j);
      if (!snap.error.empty()) a.body["error"] = snap.error;
      return reply_json(c, static_cast<unsigned>(a.code), a.body);
    }
    if (url == "/status") {
      if (j.is_null()) return reply_json(c, MHD_HTTP_SERVICE_UNAVAILABLE, {{"error", snap.error}});
      return reply(c, MHD_HTTP_OK, dump(j, 2), "application/json");
    }
    if (j.is_null()) spdlog::debug("health: /metrics without a status: {}", snap.error);
    return reply(c, MHD_HTTP_OK, render_metrics(j, FASTRESTART_VERSION), "text/plain; version=0.0.4; charset=utf-8");
  }

  static enum MHD_Result on_request(void* cls, MHD_Connection* c, const char* url, const char* method, const char*,
                             const char*, size_t* upload_size, void** con_cls) {
    try {
      return static_cast<Impl*>(cls)->handle(c, url ? url : "", method ? method : "", upload_size, con_cls);
    } catch (const std::exception& e) {
      spdlog::warn("health: {}", e.what());
      return reply_json(c, MHD_HTTP_INTERNAL_SERVER_ERROR, {{"error", "internal error"}});
    }
  }

  static void on_completed(void* cls, MHD_Connection* c, void** con_cls, enum MHD_RequestTerminationCode) {
    delete static_cast<Request*>(*con_cls);
    *con_cls = nullptr;
    auto* self = static_cast<Impl*>(cls);
    std::lock_guard lock(self->mutex);
    if (auto it = self->conns.find(c); it != self->conns.end()) {  // a keep-alive connection's next request
      it->second.answering = false;
      it->second.since = Clock::now();
    }
  }

  // Accepts and closes, on libmicrohttpd's thread: the connection limit is applied here.
  static void on_connection(void* cls, MHD_Connection* c, void**, enum MHD_ConnectionNotificationCode code) {
    auto* self = static_cast<Impl*>(cls);
    std::lock_guard lock(self->mutex);
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
      auto it = self->conns.find(c);
      if (it == self->conns.end()) return;
      if (!it->second.closing) --self->live;
      self->conns.erase(it);
      return;
    }
    const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info) return;
    self->conns[c] = Conn{info->connect_fd, ++self->accepted, Clock::now()};
    ++self->live;
    if (self->live > self->options.connection_limit) self->evict_one_locked(c);
    self->wake.notify_all();  // the sweeper: a new deadline
  }

  void stop() {
    {
      std::lock_guard lock(mutex);
      if (stopping) return;
      stopping = true;
      resume_locked([](const Request&) { return true; });  // MHD must not stop with suspended connections
      wake.notify_all();
    }
    if (daemon) MHD_stop_daemon(daemon);
    daemon = nullptr;
    if (sweeper.joinable()) sweeper.join();
    if (fetcher.joinable()) fetcher.join();
  }
};

fr::Result<std::unique_ptr<HealthServer>> HealthServer::start(const std::string& listen, Source source, Options options) {
  FR_ASSIGN(BoundSocket sock, bind_listen(listen, 128));
  auto impl = std::make_unique<Impl>();
  impl->source = std::move(source);
  impl->options = options;
  impl->port = sock.port;
  unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  if (sock.family == AF_INET6) flags |= MHD_USE_IPv6;
  const int fd = sock.fd.release();  // MHD owns it from here (MHD_stop_daemon closes it)
  impl->daemon = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &Impl::on_request, impl.get(),
      MHD_OPTION_LISTEN_SOCKET, static_cast<MHD_socket>(fd),
      // libmicrohttpd's own idle timeout only backs up the request deadline (it restarts with every byte).
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(std::ceil(std::max(options.request_deadline_s, 1.0))),
      MHD_OPTION_CONNECTION_LIMIT, options.connection_limit + kClosingHeadroom,
      MHD_OPTION_NOTIFY_COMPLETED, &Impl::on_completed, impl.get(),
      MHD_OPTION_NOTIFY_CONNECTION, &Impl::on_connection, impl.get(),
      MHD_OPTION_EXTERNAL_LOGGER, &on_log, nullptr,
      MHD_OPTION_END);
  if (!impl->daemon) {
    ::close(fd);
    return make_error(Errc::kIo, "health listen address '" + listen + "': libmicrohttpd did not start");
  }
  impl->fetcher = std::thread([raw = impl.get()] { raw->fetch_loop(); });
  impl->sweeper = std::thread([raw = impl.get()] { raw->sweep_loop(); });
  const auto colon = listen.rfind(':');
  spdlog::info("health: listening on {}:{}", listen.substr(0, colon), impl->port);
  return std::unique_ptr<HealthServer>(new HealthServer(std::move(impl)));
}

HealthServer::HealthServer(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}

uint16_t HealthServer::port() const { return m_impl->port; }

HealthServer::~HealthServer() { m_impl->stop(); }

namespace {

void on_log(void*, const char* fmt, va_list ap) {
  char buf[512];
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  std::string line(buf);
  while (!line.empty() && line.back() == '\n') line.pop_back();
  spdlog::debug("health: {}", line);
}

}  // namespace

}  // namespace fr::health
