#include "front/front.h"

#include <netinet/in.h>
#include <uv.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "front/http_request.h"
#include "front/http_response.h"
#include "front/splice.h"
#include "front/sse.h"
#include "front/stats.h"
#include "front/status_writer.h"

namespace fr::front {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kFirstBackoff = std::chrono::milliseconds(20);
constexpr auto kMaxBackoff = std::chrono::milliseconds(500);
constexpr uint64_t kTickMs = 10;
// An idle kept-alive connection to the engine is closed after this: an engine that gives each connection a
// thread gets it back soon after a burst (docs/front.md, "Design").
constexpr auto kIdleUpstreamTimeout = std::chrono::seconds(1);

class Server;
struct Client;
struct Exchange;

// One connection to the engine. It carries one attempt of one request at a time (`owner`), and between
// requests waits in Server::m_idle when the engine kept it alive (docs/front.md, "Connections to the
// engine"). Its lifetime ends in its close callback; while it has no owner its reads only watch for the
// engine closing it.
struct Upstream {
  uv_tcp_t tcp{};
  uv_connect_t connect{};
  uv_write_t write{};
  Server* server = nullptr;
  std::string wire;  // the request's bytes, alive until the write completes
  Exchange* owner = nullptr;
  std::unique_ptr<ResponseParser> parser;
  bool connected = false;  // on_up_connect succeeded
  bool idle = false;       // in Server::m_idle
  std::chrono::steady_clock::time_point idle_since{};
  bool reused = false;     // the current attempt is not this connection's first request
  bool writing = false;    // a write is queued (the connection cannot go idle before it completes)
  bool answered = false;   // a byte of the current attempt's answer arrived
};

struct Exchange {
  Client* client = nullptr;
  Request req;
  std::string wire;
  Upstream* up = nullptr;
  std::string body;                  // the engine's answer, buffered (non-streamed)
  std::unique_ptr<SseSplitter> sse;  // a streamed answer's events
  std::unique_ptr<StreamSplice> splice;  // a "stream": true request: followed across engines
  bool resuming = false;             // a started stream waits for the engine that continues it
  bool continued = false;            // counted in `continued`
  bool counted_held = false;         // counted in `held` (a continued stream may be held again)
  bool too_large = false;
  bool started = false;              // bytes of the answer reached the client
  bool chunked = false;              // a started stream is chunk-encoded to the client
  bool waiting = false;              // held: no connection, the next attempt at next_attempt
  std::optional<Clock::time_point> held_since;  // set exactly while the exchange is in Server::m_held
  Clock::time_point next_attempt{};
  Clock::duration backoff = kFirstBackoff;
  int attempts = 0;
  std::string last_error;
};

struct Client {
  uv_tcp_t tcp{};
  Server* server = nullptr;
  RequestParser parser;
  std::string in;  // read, not yet parsed
  std::unique_ptr<Exchange> ex;
  bool closing = false;
  bool close_after_writes = false;
  bool sent_continue = false;
  bool reading = true;
  int pending_writes = 0;
  explicit Client(RequestLimits l) : parser(l) {}
};

struct WriteReq {
  uv_write_t req{};
  std::string data;
  Client* client = nullptr;
};

std::string json_error(int status, const std::string& message) {
  const char* type = status == 503 ? "ServiceUnavailableError" : status == 413 ? "RequestTooLargeError" : "BadRequestError";
  nlohmann::json j = {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", status}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

const char* status_text(int s) {
  switch (s) {
    case 100: return "Continue";
    case 400: return "Bad Request";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

// Headers that describe one hop, not the message: never passed on (the front frames each side itself).
bool hop_by_hop(std::string_view name) {
  for (const char* h : {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
                        "upgrade", "content-length", "expect", "host"})
    if (iequals(name, h)) return true;
  return false;
}

// Headers only the front may send the engine: a client's copy is dropped on every attempt, as a hop-by-hop
// header is. kGeneratedTokensHeader tells the engine that the prompt's last K ids are an earlier engine's
// output for this request, which it then recomputes by decode steps instead of one prefill. Only the
// front's record of the stream knows which ids those are; a client that could send it would have the
// engine compute its own prompt token by token (slower, and not the computation that prompt otherwise
// gets), and a forwarded copy beside the front's would leave the engine two counts to choose from.
bool front_only(std::string_view name) { return iequals(name, kGeneratedTokensHeader); }

// The headers the front adds to a stream's next attempt: the count of generated ids at the end of a
// continuation's prompt of token ids; none on a first attempt or a text or chat continuation.
Headers continuation_headers(const StreamSplice& sp) {
  if (sp.generated_tokens() == 0) return {};
  return {{std::string(kGeneratedTokensHeader), std::to_string(sp.generated_tokens())}};
}

std::string chunk(std::string_view data) {
  char head[32];
  std::snprintf(head, sizeof head, "%zx\r\n", data.size());
  std::string out(head);
  out.append(data);
  out.append("\r\n");
  return out;
}

class Server {
 public:
  Server(uv_loop_t* loop, FrontOptions opt, sockaddr_storage upstream)
      : m_loop(loop), m_opt(std::move(opt)), m_upstream(upstream), m_status(loop, m_opt.status_file) {}

  Status start(int listen_fd);
  void write_status();

 private:
  // Clients.
  static void on_connection(uv_stream_t* s, int status);
  static void on_client_read(uv_stream_t* s, ssize_t nread, const uv_buf_t* buf);
  void process(Client* c);
  void begin(Client* c);
  void client_write(Client* c, std::string data);
  static void on_client_written(uv_write_t* w, int status);
  void close_client(Client* c);
  void reply(Client* c, int status, const std::string& message, bool close);
  void done(Client* c, bool keep_alive);
  std::string wire_of(const Request& r, const std::string& body, const Headers& extra = {}) const;

  // The engine.
  void attempt(Exchange* ex);
  void send_on(Exchange* ex, Upstream* u);
  Upstream* take_idle();
  void connect_new(Exchange* ex);
  void release_upstream(Exchange* ex);
  void recycle_upstream(Exchange* ex);
  void close_upstream(Upstream* u);
  static void on_up_connect(uv_connect_t* req, int status);
  static void on_up_written(uv_write_t* w, int status);
  static void on_up_read(uv_stream_t* s, ssize_t nread, const uv_buf_t* buf);
  void check_upstream(Exchange* ex);
  void upstream_failed(Exchange* ex, const std::string& why);
  void fail(Exchange* ex, const char* reason, const std::string& message);
  void unhold(Exchange* ex);
  void start_stream(Exchange* ex);
  bool continue_stream(Exchange* ex, const std::string& why);
  void end_stream(Exchange* ex, const std::string& tail, bool answered);
  void finish_buffered(Exchange* ex);

  static void on_tick(uv_timer_t* t);
  static void on_signal(uv_signal_t* s, int sig);
  void tick();
  void begin_stop();

  uv_loop_t* m_loop;
  FrontOptions m_opt;
  sockaddr_storage m_upstream;
  std::string m_upstream_host;
  uv_tcp_t m_listener{};
  uv_timer_t m_timer{};
  uv_signal_t m_sigterm{}, m_sigint{};
  FrontStats m_stats;
  StatusWriter m_status;
  bool m_dirty = true;
  bool m_stopping = false;
  Clock::time_point m_stop_deadline{};
  std::set<Exchange*> m_held;
  std::set<Client*> m_clients;
  std::vector<Upstream*> m_idle;  // kept-alive connections to the engine, the most recently used last
};

Status Server::start(int listen_fd) {
  m_upstream_host = m_opt.upstream;
  uv_tcp_init(m_loop, &m_listener);
  m_listener.data = this;
  if (int rc = uv_tcp_open(&m_listener, listen_fd); rc != 0)
    return make_error(Errc::kIo, std::string("the listening socket: ") + uv_strerror(rc));
  if (int rc = uv_listen(reinterpret_cast<uv_stream_t*>(&m_listener), 1024, on_connection); rc != 0)
    return make_error(Errc::kIo, std::string("the listening socket: listen: ") + uv_strerror(rc));
  uv_timer_init(m_loop, &m_timer);
  m_timer.data = this;
  uv_timer_start(&m_timer, on_tick, kTickMs, kTickMs);
  for (auto* s : {&m_sigterm, &m_sigint}) {
    uv_signal_init(m_loop, s);
    s->data = this;
  }
  uv_signal_start(&m_sigterm, on_signal, SIGTERM);
  uv_signal_start(&m_sigint, on_signal, SIGINT);
  write_status();
  return {};
}

void Server::write_status() {
  m_stats.held_now = m_held.size();
  m_stats.connections = m_clients.size();
  m_stats.upstream_idle = m_idle.size();
  // Off the loop (status_writer.h): a write that waits on the disk never delays a request.
  if (!m_opt.status_file.empty()) m_status.post(m_stats.to_json().dump() + "\n");
  m_dirty = false;
}

// ---- clients ----

void Server::on_connection(uv_stream_t* s, int status) {
  auto* self = static_cast<Server*>(s->data);
  if (status < 0 || self->m_stopping) return;
  auto* c = new Client(RequestLimits{self->m_opt.max_body_bytes, 32 << 10});
  c->server = self;
  uv_tcp_init(self->m_loop, &c->tcp);
  c->tcp.data = c;
  if (uv_accept(s, reinterpret_cast<uv_stream_t*>(&c->tcp)) != 0) {
    uv_close(reinterpret_cast<uv_handle_t*>(&c->tcp), [](uv_handle_t* h) { delete static_cast<Client*>(h->data); });
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  self->m_clients.insert(c);
  self->m_dirty = true;
  uv_read_start(reinterpret_cast<uv_stream_t*>(&c->tcp),
                [](uv_handle_t*, size_t, uv_buf_t* b) {
                  static thread_local char buf[64 << 10];
                  *b = uv_buf_init(buf, sizeof buf);
                },
                on_client_read);
}

void Server::on_client_read(uv_stream_t* s, ssize_t nread, const uv_buf_t* buf) {
  auto* c = static_cast<Client*>(s->data);
  Server* self = c->server;
  if (nread < 0) {
    // The client is gone (or half-closed; either way no answer can be expected to matter to it).
    if (c->ex) self->fail(c->ex.get(), kClientGone, "");
    self->close_client(c);
    return;
  }
  if (nread == 0) return;
  c->in.append(buf->base, static_cast<size_t>(nread));
  self->process(c);
}

void Server::process(Client* c) {
  while (!c->ex && !c->closing && !c->close_after_writes && !c->in.empty()) {
    const size_t used = c->parser.feed(c->in.data(), c->in.size());
    c->in.erase(0, used);
    if (c->parser.failed()) {
      ++m_stats.rejected[std::to_string(c->parser.error_status())];
      reply(c, c->parser.error_status(), c->parser.error(), true);
      return;
    }
    if (c->parser.head_complete() && c->parser.request().expect_continue && !c->sent_continue && !c->parser.complete()) {
      c->sent_continue = true;
      client_write(c, "HTTP/1.1 100 Continue\r\n\r\n");
    }
    if (c->parser.complete()) {
      begin(c);
      continue;
    }
    if (used == 0) break;
  }
  // Bound what a client may send ahead while its request is answered: stop reading past the limits and
  // resume once the answer is out.
  const bool over = c->in.size() > m_opt.max_body_bytes + (64 << 10);
  if (!c->closing && over && c->reading) {
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&c->tcp));
    c->reading = false;
  } else if (!c->closing && !over && !c->reading) {
    c->reading = true;
    uv_read_start(reinterpret_cast<uv_stream_t*>(&c->tcp),
                  [](uv_handle_t*, size_t, uv_buf_t* b) {
                    static thread_local char buf[64 << 10];
                    *b = uv_buf_init(buf, sizeof buf);
                  },
                  on_client_read);
  }
}

void Server::begin(Client* c) {
  ++m_stats.received;
  m_dirty = true;
  auto ex = std::make_unique<Exchange>();
  ex->client = c;
  ex->req = std::move(c->parser.request());
  c->parser.reset();
  c->sent_continue = false;
  Request& r = ex->req;
  if (auto bad = check_request(r)) {
    ++m_stats.rejected[std::to_string(bad->first)];
    reply(c, bad->first, bad->second, !r.keep_alive);
    return;
  }
  if (m_stopping) {
    ++m_stats.failed[kStopping];
    reply(c, 503, "the front is stopping", true);
    return;
  }
  if (r.stream) ex->splice = std::make_unique<StreamSplice>(r, m_opt.max_body_bytes);
  ex->wire = wire_of(r, ex->splice ? ex->splice->forward_body() : r.body);
  c->ex = std::move(ex);
  attempt(c->ex.get());
}

// The request's bytes to the engine: the client's request re-framed, its headers but the hop-by-hop and
// front-only ones, then `extra` (the front's own, for this attempt).
std::string Server::wire_of(const Request& r, const std::string& body, const Headers& extra) const {
  std::string w = r.method + " " + r.url + " HTTP/1.1\r\nHost: " + m_upstream_host + "\r\n";
  for (const auto& [k, v] : r.headers)
    if (!hop_by_hop(k) && !front_only(k)) w += k + ": " + v + "\r\n";
  for (const auto& [k, v] : extra) w += k + ": " + v + "\r\n";
  if (!body.empty() || r.method == "POST" || r.method == "PUT" || r.method == "PATCH")
    w += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  // The engine keeps the connection for the next request unless the pool is off (docs/front.md).
  w += m_opt.max_idle_connections > 0 ? "\r\n" : "Connection: close\r\n\r\n";
  w += body;
  return w;
}

void Server::client_write(Client* c, std::string data) {
  if (c->closing) return;
  auto* w = new WriteReq;
  w->data = std::move(data);
  w->client = c;
  w->req.data = w;
  ++c->pending_writes;
  uv_buf_t b = uv_buf_init(w->data.data(), static_cast<unsigned>(w->data.size()));
  if (uv_write(&w->req, reinterpret_cast<uv_stream_t*>(&c->tcp), &b, 1, on_client_written) != 0) {
    --c->pending_writes;
    delete w;
    close_client(c);
  }
}

void Server::on_client_written(uv_write_t* req, int status) {
  auto* w = static_cast<WriteReq*>(req->data);
  Client* c = w->client;
  delete w;
  --c->pending_writes;
  if (c->closing) return;
  if (status < 0 || (c->close_after_writes && c->pending_writes == 0)) c->server->close_client(c);
}

void Server::close_client(Client* c) {
  if (c->closing) return;
  c->closing = true;
  if (c->ex) {
    unhold(c->ex.get());
    release_upstream(c->ex.get());
    c->ex.reset();
  }
  m_clients.erase(c);
  m_dirty = true;
  // Writes still queued are cancelled: their callbacks run (seeing `closing`) before the close callback.
  uv_read_stop(reinterpret_cast<uv_stream_t*>(&c->tcp));
  uv_close(reinterpret_cast<uv_handle_t*>(&c->tcp), [](uv_handle_t* h) { delete static_cast<Client*>(h->data); });
}

void Server::reply(Client* c, int status, const std::string& message, bool close) {
  const std::string body = json_error(status, message);
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + status_text(status) +
                    "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  if (close) out += "Connection: close\r\n";
  out += "\r\n" + body;
  client_write(c, std::move(out));
  done(c, !close);
}

// The exchange is over (its answer is queued): the next request, or the close once the writes are out.
void Server::done(Client* c, bool keep_alive) {
  if (c->ex) {
    unhold(c->ex.get());
    recycle_upstream(c->ex.get());
    c->ex.reset();
  }
  m_dirty = true;
  if (!keep_alive || m_stopping) {
    c->close_after_writes = true;
    if (c->pending_writes == 0) close_client(c);
    return;
  }
  process(c);
}

// ---- the engine ----

void Server::attempt(Exchange* ex) {
  ex->waiting = false;
  if (++ex->attempts > 1) ++m_stats.resent;
  if (Upstream* u = take_idle()) return send_on(ex, u);
  connect_new(ex);
}

// The exchange's attempt on `u`, a connection that is connected: a fresh parser, the request written, the
// answer read.
void Server::send_on(Exchange* ex, Upstream* u) {
  u->owner = ex;
  u->answered = false;
  u->wire = ex->wire;
  ex->up = u;
  ex->body.clear();
  ex->too_large = false;
  ex->sse.reset();
  const bool head = ex->req.method == "HEAD";
  u->parser = std::make_unique<ResponseParser>(head, [this, u](std::string_view data) {
    Exchange* e = u->owner;
    if (!e) return false;
    if (u->parser->event_stream()) {
      if (!e->sse) e->sse = std::make_unique<SseSplitter>(m_opt.max_response_bytes);
      e->sse->feed(data);
      return true;
    }
    if (e->body.size() + data.size() > m_opt.max_response_bytes) {
      e->too_large = true;
      return false;
    }
    e->body.append(data);
    return true;
  });
  if (!u->connected) return;  // on_up_connect writes
  uv_buf_t b = uv_buf_init(u->wire.data(), static_cast<unsigned>(u->wire.size()));
  if (int rc = uv_write(&u->write, reinterpret_cast<uv_stream_t*>(&u->tcp), &b, 1, on_up_written); rc != 0)
    return upstream_failed(ex, std::string("send: ") + uv_strerror(rc));
  u->writing = true;
}

// The most recently used idle connection (the engine closes the others first when it times them out).
Upstream* Server::take_idle() {
  while (!m_idle.empty()) {
    Upstream* u = m_idle.back();
    m_idle.pop_back();
    u->idle = false;
    m_dirty = true;
    if (uv_is_closing(reinterpret_cast<uv_handle_t*>(&u->tcp)) == 0) {
      u->reused = true;
      return u;
    }
  }
  return nullptr;
}

void Server::connect_new(Exchange* ex) {
  ++m_stats.upstream_connects;
  m_dirty = true;
  auto* u = new Upstream;
  u->server = this;
  u->tcp.data = u;
  u->connect.data = u;
  u->write.data = u;
  uv_tcp_init(m_loop, &u->tcp);
  send_on(ex, u);  // sets the parser; the write waits for the connection
  int rc = uv_tcp_connect(&u->connect, &u->tcp, reinterpret_cast<const sockaddr*>(&m_upstream), on_up_connect);
  if (rc != 0) upstream_failed(ex, std::string("connect: ") + uv_strerror(rc));
}

void Server::release_upstream(Exchange* ex) {
  Upstream* u = std::exchange(ex->up, nullptr);
  if (!u) return;
  u->owner = nullptr;
  close_upstream(u);
}

// The exchange is over: its connection waits for the next request when the engine's answer left it
// reusable (ResponseParser::reusable) and the pool has room; otherwise it is closed.
void Server::recycle_upstream(Exchange* ex) {
  Upstream* u = ex->up;
  if (!u || !u->parser || !u->parser->reusable() || u->writing || m_stopping ||
      m_idle.size() >= m_opt.max_idle_connections ||
      uv_is_closing(reinterpret_cast<uv_handle_t*>(&u->tcp)) != 0)
    return release_upstream(ex);
  ex->up = nullptr;
  u->owner = nullptr;
  u->parser.reset();
  u->idle = true;
  u->idle_since = Clock::now();
  m_idle.push_back(u);
  m_dirty = true;
}

void Server::close_upstream(Upstream* u) {
  if (u->idle) {
    m_idle.erase(std::find(m_idle.begin(), m_idle.end(), u));
    u->idle = false;
    m_dirty = true;
  }
  if (uv_is_closing(reinterpret_cast<uv_handle_t*>(&u->tcp)) == 0)
    uv_close(reinterpret_cast<uv_handle_t*>(&u->tcp), [](uv_handle_t* h) { delete static_cast<Upstream*>(h->data); });
}

void Server::on_up_connect(uv_connect_t* req, int status) {
  auto* u = static_cast<Upstream*>(req->data);
  Exchange* ex = u->owner;
  if (!ex) return;
  Server* self = u->server;
  if (status < 0) return self->upstream_failed(ex, std::string("connect: ") + uv_strerror(status));
  u->connected = true;
  uv_tcp_nodelay(&u->tcp, 1);
  uv_buf_t b = uv_buf_init(u->wire.data(), static_cast<unsigned>(u->wire.size()));
  if (int rc = uv_write(&u->write, reinterpret_cast<uv_stream_t*>(&u->tcp), &b, 1, on_up_written); rc != 0)
    return self->upstream_failed(ex, std::string("send: ") + uv_strerror(rc));
  u->writing = true;
  uv_read_start(reinterpret_cast<uv_stream_t*>(&u->tcp),
                [](uv_handle_t*, size_t, uv_buf_t* b2) {
                  static thread_local char buf[64 << 10];
                  *b2 = uv_buf_init(buf, sizeof buf);
                },
                on_up_read);
}

void Server::on_up_written(uv_write_t* w, int status) {
  auto* u = static_cast<Upstream*>(w->data);
  if (status == UV_ECANCELED) return;  // closed: the handle's memory stays until its close callback
  u->writing = false;
  Exchange* ex = u->owner;
  if (!ex || status >= 0) return;
  u->server->upstream_failed(ex, std::string("send: ") + uv_strerror(status));
}

void Server::on_up_read(uv_stream_t* s, ssize_t nread, const uv_buf_t* buf) {
  auto* u = static_cast<Upstream*>(s->data);
  if (nread == 0) return;
  Exchange* ex = u->owner;
  if (!ex) {
    // Idle: the engine closed it (its keep-alive timeout, or its death), or sent bytes nobody asked for.
    if (u->idle) u->server->close_upstream(u);
    return;
  }
  if (nread > 0) {
    u->answered = true;
    u->parser->feed(buf->base, static_cast<size_t>(nread));
  } else {
    u->parser->feed_eof();
  }
  u->server->check_upstream(ex);
}

void Server::check_upstream(Exchange* ex) {
  Upstream* u = ex->up;
  ResponseParser& p = *u->parser;
  if (ex->too_large)
    return fail(ex, kResponseTooLarge,
                "the engine's answer is over front.max_response_bytes = " + std::to_string(m_opt.max_response_bytes));
  if (p.failed()) return upstream_failed(ex, p.error());
  // 503 from the engine: not ready yet (a restarted engine that accepts while it loads) or shedding load.
  // Either way the request is held and sent again, like a refused connection, until front.hold_s.
  if (p.head_complete() && p.status() == 503) {
    if (p.complete()) upstream_failed(ex, "the engine answered 503: " + ex->body.substr(0, 200));
    return;
  }
  if (ex->started && p.head_complete() && (p.status() != 200 || !p.event_stream())) {
    // The engine asked to continue a stream answered otherwise (it refused the longer prompt, say).
    if (!p.complete()) return;
    ++m_stats.not_continued["engine_refused"];
    ++m_stats.failed[kStreamInterrupted];
    return end_stream(ex, error_event("the engine stopped mid-stream and the next one refused its continuation (" +
                                      std::to_string(p.status()) + ": " + ex->body.substr(0, 200) +
                                      "); the stream cannot be continued") + done_event(), false);
  }
  if (!p.head_complete() || !p.event_stream()) {
    if (p.complete()) finish_buffered(ex);
    return;
  }
  if (!ex->started) start_stream(ex);
  if (ex->resuming) {
    // The engine that continues the stream answers: the client's stream goes on (no second head).
    ex->resuming = false;
    unhold(ex);
    if (!std::exchange(ex->continued, true)) ++m_stats.continued;
    m_dirty = true;
  }
  if (ex->sse) {
    while (auto ev = ex->sse->next_event()) {
      std::string out = ex->splice ? ex->splice->on_event(*ev) : std::move(*ev);
      if (!out.empty()) client_write(ex->client, ex->chunked ? chunk(out) : out);
    }
    if (ex->sse->failed()) return upstream_failed(ex, ex->sse->error());
  }
  if (p.complete()) {
    Client* c = ex->client;
    const bool chunked = ex->chunked;
    const bool keep = chunked && ex->req.keep_alive;
    if (chunked) client_write(c, "0\r\n\r\n");
    ++m_stats.answered;
    done(c, keep);
  }
}

void Server::start_stream(Exchange* ex) {
  const ResponseParser& p = *ex->up->parser;
  Client* c = ex->client;
  ex->started = true;
  ex->chunked = ex->req.http_minor >= 1 || ex->req.http_major > 1;
  unhold(ex);
  std::string out = "HTTP/1.1 " + std::to_string(p.status()) + " " + p.reason() + "\r\n";
  for (const auto& [k, v] : p.headers())
    if (!hop_by_hop(k)) out += k + ": " + v + "\r\n";
  out += ex->chunked ? "Transfer-Encoding: chunked\r\n" : "Connection: close\r\n";
  if (ex->chunked && !ex->req.keep_alive) out += "Connection: close\r\n";
  out += "\r\n";
  client_write(c, std::move(out));
}

void Server::finish_buffered(Exchange* ex) {
  const ResponseParser& p = *ex->up->parser;
  Client* c = ex->client;
  const Request& r = ex->req;
  std::string out = "HTTP/1.1 " + std::to_string(p.status()) + " " + p.reason() + "\r\n";
  const std::string* head_length = nullptr;
  for (const auto& [k, v] : p.headers()) {
    if (iequals(k, "content-length")) head_length = &v;
    if (!hop_by_hop(k)) out += k + ": " + v + "\r\n";
  }
  // A HEAD answer carries the length its GET would have; every other answer the length of what it holds.
  out += "Content-Length: " + (r.method == "HEAD" && head_length ? *head_length : std::to_string(ex->body.size())) + "\r\n";
  if (!r.keep_alive) out += "Connection: close\r\n";
  else if (r.http_major == 1 && r.http_minor == 0) out += "Connection: keep-alive\r\n";
  out += "\r\n";
  out += ex->body;
  ++m_stats.answered;
  const bool keep = r.keep_alive;
  client_write(c, std::move(out));
  done(c, keep);
}

void Server::upstream_failed(Exchange* ex, const std::string& why) {
  // A kept-alive connection the engine closed before it answered a byte (its idle timeout crossed the
  // request, or it died while the connection waited): sent again at once on a new connection, neither
  // held nor counted re-sent. A dead engine fails that one too, and then it is held.
  const bool stale = ex->up && ex->up->reused && !ex->up->answered;
  release_upstream(ex);
  if (stale) return connect_new(ex);
  ex->last_error = why;
  if (ex->started && !continue_stream(ex, why)) return;
  const auto now = Clock::now();
  if (!ex->held_since) {
    if (m_held.size() >= m_opt.max_held_requests)
      return fail(ex, kTooManyHeld,
                  "the engine cannot be reached (" + why + ") and front.max_held_requests = " +
                      std::to_string(m_opt.max_held_requests) + " requests are held already");
    ex->held_since = now;
    m_held.insert(ex);
    if (!std::exchange(ex->counted_held, true)) ++m_stats.held;
    m_dirty = true;
  }
  ex->waiting = true;
  ex->next_attempt = now + ex->backoff;
  ex->backoff = std::min<Clock::duration>(ex->backoff * 2, kMaxBackoff);
}

// The engine died after the client's stream started. True: the exchange is to be held and sent again (its
// wire is the continuation); false: the stream was ended here.
bool Server::continue_stream(Exchange* ex, const std::string& why) {
  StreamSplice* sp = ex->splice.get();
  const auto next = sp ? sp->resume() : StreamSplice::Next::kCannot;
  if (next == StreamSplice::Next::kResend) {
    ex->wire = wire_of(ex->req, sp->body(), continuation_headers(*sp));
    ex->resuming = true;
    return true;
  }
  if (next == StreamSplice::Next::kFinish) {
    if (!sp->tail().empty() && !std::exchange(ex->continued, true)) ++m_stats.continued;
    end_stream(ex, sp->tail(), true);
    return false;
  }
  // Not continued: end the stream on an event boundary with an error the client can parse.
  const std::string reason = sp ? sp->reason() : "not_streamed_completion";
  ++m_stats.not_continued[reason];
  ++m_stats.failed[kStreamInterrupted];
  end_stream(ex,
             error_event("the engine stopped mid-stream (" + why + "); the stream cannot be continued: " +
                         (sp ? sp->why() : std::string("it was not asked for as \"stream\": true")) + " [" + reason + "]") +
                 done_event(),
             false);
  return false;
}

// Ends a started stream with `tail` (whole events) and the chunked encoding's last chunk.
void Server::end_stream(Exchange* ex, const std::string& tail, bool answered) {
  Client* c = ex->client;
  std::string out = tail.empty() ? "" : (ex->chunked ? chunk(tail) : tail);
  if (ex->chunked) out += "0\r\n\r\n";
  if (!out.empty()) client_write(c, std::move(out));
  if (answered) ++m_stats.answered;
  m_dirty = true;
  done(c, ex->chunked && ex->req.keep_alive);
}

// The exchange is no longer held: an engine answers it (its stream started, or a continuation's did) or it
// ended. Its hold clock and backoff go with it, so that a later death (of the engine streaming it) holds it
// again afresh: upstream_failed holds only an exchange without a hold clock, and tick() re-sends and times
// out only the held ones. A clock left running here would leave a stream that was held before its head,
// then cut mid-way, waiting for a re-send that never comes.
void Server::unhold(Exchange* ex) {
  ex->held_since.reset();
  ex->backoff = kFirstBackoff;
  if (m_held.erase(ex) > 0) m_dirty = true;
}

// The request ends without the engine's answer: `reason` counts it; the client (if still there) gets 503.
void Server::fail(Exchange* ex, const char* reason, const std::string& message) {
  ++m_stats.failed[reason];
  m_dirty = true;
  Client* c = ex->client;
  unhold(ex);
  release_upstream(ex);
  if (std::string_view(reason) == kClientGone) return;  // the caller closes the client
  if (ex->started) {
    std::string tail = error_event(message) + done_event();
    client_write(c, ex->chunked ? chunk(tail) + "0\r\n\r\n" : tail);
    done(c, false);
    return;
  }
  reply(c, 503, message, !ex->req.keep_alive);
}

void Server::on_tick(uv_timer_t* t) { static_cast<Server*>(t->data)->tick(); }

void Server::tick() {
  const auto now = Clock::now();
  const auto hold = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(m_opt.hold_s));
  for (Exchange* ex : std::vector<Exchange*>(m_held.begin(), m_held.end())) {
    if (!m_held.count(ex)) continue;
    if (now - *ex->held_since >= hold) {
      char held_for[32];
      std::snprintf(held_for, sizeof held_for, "%g", m_opt.hold_s);
      fail(ex, kHoldTimeout,
           std::string("the engine did not answer within front.hold_s = ") + held_for + " s (last: " + ex->last_error + ")");
    } else if (ex->waiting && now >= ex->next_attempt) {
      attempt(ex);
    }
  }
  // The oldest idle connections are at the front of m_idle.
  while (!m_idle.empty() && now - m_idle.front()->idle_since >= kIdleUpstreamTimeout) close_upstream(m_idle.front());
  if (m_stopping) {
    bool busy = false;
    for (Client* c : m_clients) busy = busy || c->ex != nullptr;
    if (!busy || now >= m_stop_deadline) {
      for (Client* c : std::vector<Client*>(m_clients.begin(), m_clients.end())) {
        if (c->ex) fail(c->ex.get(), kStopping, "the front is stopping");
        close_client(c);
      }
      write_status();
      uv_close(reinterpret_cast<uv_handle_t*>(&m_timer), nullptr);
      uv_close(reinterpret_cast<uv_handle_t*>(&m_sigterm), nullptr);
      uv_close(reinterpret_cast<uv_handle_t*>(&m_sigint), nullptr);
      return;
    }
  }
  if (m_dirty) write_status();
}

void Server::on_signal(uv_signal_t* s, int) { static_cast<Server*>(s->data)->begin_stop(); }

void Server::begin_stop() {
  if (m_stopping) return;
  m_stopping = true;
  m_stop_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(m_opt.stop_grace_s));
  // Closing our descriptor leaves the socket listening for its other holder (fastrestartd): connections
  // that arrive from now on wait for the next front.
  uv_close(reinterpret_cast<uv_handle_t*>(&m_listener), nullptr);
  for (Upstream* u : std::vector<Upstream*>(m_idle)) close_upstream(u);
  for (Client* c : std::vector<Client*>(m_clients.begin(), m_clients.end()))
    if (!c->ex && c->pending_writes == 0) close_client(c);
}

Result<sockaddr_storage> parse_upstream(const std::string& s) {
  sockaddr_storage addr{};
  auto bad = [&](const std::string& why) {
    return make_error(Errc::kInvalidArgument, "--upstream '" + s + "': " + why + " (expected host:port, [v6]:port)");
  };
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("no port");
  std::string host = s.substr(0, colon);
  const std::string port_s = s.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(port_s.c_str(), &end, 10);
  if (port_s.empty() || *end != '\0' || port < 1 || port > 65535) return bad("the port must be 1..65535");
  if (host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    if (uv_ip6_addr(host.c_str(), static_cast<int>(port), reinterpret_cast<sockaddr_in6*>(&addr)) != 0)
      return bad("not an IPv6 address");
  } else if (uv_ip4_addr(host.c_str(), static_cast<int>(port), reinterpret_cast<sockaddr_in*>(&addr)) != 0) {
    return bad("not an IPv4 address (names are not resolved)");
  }
  return addr;
}

}  // namespace

Result<int> run_front(int listen_fd, const FrontOptions& options) {
  FR_ASSIGN(auto addr, parse_upstream(options.upstream));
  if (!(options.hold_s >= 0)) return make_error(Errc::kInvalidArgument, "--hold-s must be >= 0");
  if (options.max_body_bytes == 0) return make_error(Errc::kInvalidArgument, "--max-body-bytes must be > 0");
  if (options.max_response_bytes == 0) return make_error(Errc::kInvalidArgument, "--max-response-bytes must be > 0");
  uv_loop_t loop;
  uv_loop_init(&loop);
  auto server = std::make_unique<Server>(&loop, options, addr);
  if (auto st = server->start(listen_fd); !st.ok()) {
    uv_walk(&loop, [](uv_handle_t* h, void*) { if (!uv_is_closing(h)) uv_close(h, nullptr); }, nullptr);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return st.error();
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return 0;
}

}  // namespace fr::front
