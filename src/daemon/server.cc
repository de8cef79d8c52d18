#include "daemon/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <spdlog/spdlog.h>

#include "common/digest.h"
#include "daemon/preload.h"
#include "protocol/daemon_status.h"

namespace fr::daemon {

using proto::json;

struct Server::Conn {
  int id = 0;
  UniqueFd fd;
  PeerCred peer;
  std::thread thread;
  std::atomic<bool> done{false};
  // Idle: waiting for (or receiving) a request, no publish open. The longest-idle connection gives its
  // slot to a new one when all are taken (docs/protocol.md, "Connection slots").
  std::atomic<bool> idle{true};
  std::atomic<int64_t> idle_since_ns{0};
  std::atomic<bool> evicted{false};
  std::string publishing;  // fingerprint of an uncommitted publish
  Deadline publish_deadline{};  // when an uncommitted publish is aborted (--publish-timeout-s)
  std::string raw_manifest;  // set by a hit: spliced into the reply as "manifest" (serialized once per entry)
  // A lease waiting for its arena's holder: not counted against the connection slots (at most one per
  // arena waits, ArenaTable), so waiting leases never crowd out the engine's attach or a status poll.
  std::atomic<bool> lease_waiting{false};
  // The current request's sender, as the kernel named it for that frame (docs/protocol.md, "Arena security").
  MessageSender sender;
  bool senders_differ = false;
};

namespace {

constexpr double kHelloTimeoutS = 10;              // docs/protocol.md, "Frame limits and timeouts"
constexpr double kIdleTimeoutS = 7 * 24 * 3600;  // connections may stay open; shutdown() wakes them
constexpr char kWakeStop = 1, kWakeReap = 2;      // bytes on the self-pipe

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The publish rule of docs/protocol.md: the key's identities were taken before the engine read the files;
// a file that changed since cannot vouch for the bytes, so the publish is refused, naming it.
Status check_files_unchanged(const proto::Key& key, const std::string& where) {
  for (size_t i = 0; i < key.files.size(); ++i) {
    const FileIdentity& was = key.files[i];
    const std::string at = where + ".files[" + std::to_string(i) + "] " + was.path;
    auto now = identify_file(was.path);
    if (!now.ok()) return make_error(Errc::kCorrupt, at + " can no longer be identified (" + now.error().message + "); not published");
    if (std::string why = identity_change(was, *now); !why.empty())
      return make_error(Errc::kCorrupt, at + " changed after the engine identified it (" + why +
                                            "); the bytes it read may not be the ones on disk now; not published");
  }
  return {};
}
constexpr size_t kMaxAttachRecords = 64;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json ok(json j = json::object()) {
  j["ok"] = true;
  return j;
}

Result<std::vector<std::string>> string_list(const json& req, const char* field, const std::string& where,
                                             size_t max_items, bool required) {
  std::vector<std::string> out;
  auto it = req.find(field);
  if (it == req.end()) {
    if (required) return make_error(Errc::kInvalidArgument, where + "." + field + ": missing");
    return out;
  }
  if (!it->is_array() || it->size() > max_items)
    return make_error(Errc::kInvalidArgument, where + "." + field + ": not an array of at most " + std::to_string(max_items) + " strings");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    if (!v.is_string() || v.get_ref<const std::string&>().empty() || v.get_ref<const std::string&>().size() > 4096)
      return make_error(Errc::kInvalidArgument, where + "." + field + "[" + std::to_string(i) + "]: not a non-empty string");
    out.push_back(v.get<std::string>());
  }
  return out;
}

proto::DaemonEntryStatus entry_status(const Entry& e) {
  proto::DaemonEntryStatus s;
  s.fingerprint = e.fingerprint;
  s.state = entry_state_name(e.state);
  s.source = e.source;
  s.pool_bytes = e.pool ? e.pool->size() : 0;
  s.data_bytes = e.manifest.data_bytes;
  s.tensors = e.manifest.tensors.size();
  s.files = e.files;
  s.config = e.key.config;
  if (e.manifest.digest) s.digest = digest_hex(*e.manifest.digest);
  if (!e.error.empty()) s.error = e.error;
  auto end = e.state == EntryState::kLoading ? std::chrono::steady_clock::now() : e.progress.finished;
  const double elapsed = std::chrono::duration<double>(end - e.progress.started).count();
  const uint64_t done = e.progress.done_bytes.load();
  s.progress = {done, e.progress.total_bytes, elapsed, elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0};
  for (const auto& a : e.attaches) s.attaches.push_back({a.pid, a.uid, a.mode, a.unix_time});
  return s;
}

}  // namespace

Result<std::unique_ptr<Server>> Server::create(Backend& backend, ServerOptions options) {
  std::unique_ptr<Server> s(new Server(backend, std::move(options)));
  if (s->m_opts.socket_dir.empty()) s->m_opts.socket_dir = default_socket_dir();
  FR_TRY(ensure_private_dir(s->m_opts.socket_dir, s->m_opts.group));
  const std::string base = s->m_opts.socket_dir + "/weightd-" + backend.gpu_uuid();
  FR_ASSIGN(s->m_lock, LockFile::acquire(base + ".lock"));
  s->m_socket_path = base + ".sock";
  // Only the lock holder may remove a socket left by a daemon that died without cleaning up.
  if (::unlink(s->m_socket_path.c_str()) == 0) spdlog::info("removed stale socket {}", s->m_socket_path);
  FR_ASSIGN(s->m_listen, listen_unix(s->m_socket_path, s->m_opts.group ? 0660 : 0600));
  // Every request then carries its sender's credentials (and pidfd), which arena requests are judged by.
  FR_ASSIGN(s->m_pidfd_messages, pass_sender_credentials(s->m_listen.get()));
  if (!s->m_pidfd_messages)
    spdlog::warn("this kernel has no SO_PASSPIDFD (Linux 6.5): an arena lease is granted only to the process that connected");
  if (s->m_opts.group && ::chown(s->m_socket_path.c_str(), static_cast<uid_t>(-1), *s->m_opts.group) != 0)
    return sys_error("chown " + s->m_socket_path);
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return sys_error("pipe");
  s->m_wake_r.reset(p[0]);
  s->m_wake_w.reset(p[1]);
  return s;
}

Server::Server(Backend& b, ServerOptions o)
    : m_backend(b), m_opts(std::move(o)), m_arenas(b, m_opts.arenas) {}

Server::~Server() {
  m_stopping = true;
  m_arenas.stop();
  reap_connections(true);
  m_store.clear();
  if (!m_socket_path.empty()) ::unlink(m_socket_path.c_str());
}

void Server::request_stop() {
  m_stopping = true;
  char c = kWakeStop;
  [[maybe_unused]] auto r = ::write(m_wake_w.get(), &c, 1);
}

bool Server::peer_allowed(const PeerCred& p) const {
  if (p.uid == ::geteuid()) return true;
  return m_opts.group && peer_in_group(p, *m_opts.group);
}

Status Server::run() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  UniqueFd sfd(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!sfd) return sys_error("signalfd");
  spdlog::info("listening on {} (backend {}, gpu {})", m_socket_path, m_backend.name(), m_backend.gpu_uuid());

  while (!m_stopping) {
    pollfd fds[3] = {{m_listen.get(), POLLIN, 0}, {sfd.get(), POLLIN, 0}, {m_wake_r.get(), POLLIN, 0}};
    int r = ::poll(fds, 3, 1000);
    reap_connections(false);
    if (r < 0) {
      if (errno == EINTR) continue;
      return sys_error("poll");
    }
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo si{};
      [[maybe_unused]] auto n = ::read(sfd.get(), &si, sizeof si);
      spdlog::info("received {}, shutting down", strsignal(static_cast<int>(si.ssi_signo)));
      break;
    }
    if (fds[2].revents & POLLIN) {
      char buf[64];
      while (::read(m_wake_r.get(), buf, sizeof buf) > 0) {
      }
      if (m_stopping) break;  // else a connection ended: reaped at the top of the loop
    }
    if (!(fds[0].revents & POLLIN)) continue;

    UniqueFd cfd(::accept4(m_listen.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!cfd) {
      spdlog::warn("accept: {}", std::strerror(errno));
      continue;
    }
    // Accepted connections inherit SO_PASSCRED/SO_PASSPIDFD from the listener on recent kernels; set them
    // again before the greeting, so that no request of this client comes without its sender's credentials.
    (void)pass_sender_credentials(cfd.get());
    auto cred = peer_cred(cfd.get());
    if (!cred.ok() || !peer_allowed(*cred)) {
      spdlog::warn("refused a client: pid {} uid {} gid {} is not uid {}{}", cred.ok() ? cred->pid : -1,
                   cred.ok() ? static_cast<long>(cred->uid) : -1L, cred.ok() ? static_cast<long>(cred->gid) : -1L,
                   ::geteuid(), m_opts.group ? " nor in the allowed group" : "");
      (void)proto::write_frame(cfd.get(), proto::error_reply(make_error(Errc::kPermissionDenied,
                                   "peer uid " + std::to_string(cred.ok() ? cred->uid : 0) + " is not allowed")),
                               -1, deadline_in(1));
      continue;
    }
    std::lock_guard lk(m_conn_mu);
    if (!make_room()) {
      spdlog::warn("refused pid {}: all {} connections are busy", cred->pid, m_opts.max_clients);
      (void)proto::write_frame(cfd.get(), proto::error_reply(make_error(Errc::kBusy, "too many connections")), -1, deadline_in(1));
      continue;
    }
    auto c = std::make_unique<Conn>();
    c->id = m_next_conn++;
    c->fd = std::move(cfd);
    c->peer = *cred;
    c->idle_since_ns = steady_ns();
    Conn* raw = c.get();
    m_conns.emplace(c->id, std::move(c));
    raw->thread = std::thread([this, raw] {
      serve(*raw);
      raw->done = true;
    });
  }
  m_stopping = true;
  m_arenas.stop();  // waiting leases end before their connections are joined
  m_listen.reset();
  ::unlink(m_socket_path.c_str());
  reap_connections(true);
  m_store.clear();
  spdlog::info("released every pool; exiting");
  return {};
}

bool Server::make_room() {
  size_t live = 0;
  Conn* oldest = nullptr;
  size_t waiting = 0;
  for (auto& [id, c] : m_conns) {
    if (c->done || c->evicted) continue;
    if (c->lease_waiting) {
      ++waiting;
      continue;
    }
    ++live;
    if (c->idle && (!oldest || c->idle_since_ns < oldest->idle_since_ns)) oldest = c.get();
  }
  const size_t others = m_conns.size() - waiting;
  if (live < m_opts.max_clients) return others < 2 * m_opts.max_clients;  // leaving ones are brief
  if (!oldest || others >= 2 * m_opts.max_clients) return false;
  // Its own thread tells it why (it may be writing a reply right now): SHUT_RD ends its wait for a request.
  oldest->evicted = true;
  ::shutdown(oldest->fd.get(), SHUT_RD);
  return true;
}

void Server::reap_connections(bool all) {
  std::vector<std::unique_ptr<Conn>> gone;
  {
    std::lock_guard lk(m_conn_mu);
    for (auto it = m_conns.begin(); it != m_conns.end();) {
      if (all) ::shutdown(it->second->fd.get(), SHUT_RDWR);
      if (all || it->second->done) {
        gone.push_back(std::move(it->second));
        it = m_conns.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : gone)
    if (c->thread.joinable()) c->thread.join();
}

json Server::hello() const {
  return json{{"op", "hello"},
              {"protocol", proto::kVersion},
              {"daemon", "fastrestart-weightd " FASTRESTART_VERSION},
              {"pid", ::getpid()},
              {"backend", m_backend.name()},
              {"gpu_uuid", m_backend.gpu_uuid()},
              {"gpu_name", m_backend.gpu_name()},
              {"capabilities", {"status", "attach", "publish", "preload", "evict", "shutdown", "verify", "arena_lease", "arena_release"}},
              {"max_frame", proto::kMaxFrameBytes}};
}

void Server::serve(Conn& c) {
  serve_requests(c);
  abort_publish(c);
  // Close at once (the fd itself goes when the loop reaps this connection), and wake the loop to reap.
  ::shutdown(c.fd.get(), SHUT_RDWR);
  char w = kWakeReap;
  [[maybe_unused]] auto r = ::write(m_wake_w.get(), &w, 1);
}

void Server::read_failed(Conn& c, const Error& e) {
  const int fd = c.fd.get();
  if (c.evicted) {
    double idle = static_cast<double>(steady_ns() - c.idle_since_ns) / 1e9;
    spdlog::info("closed the connection of pid {} (idle {:.1f} s) to make room for a new one", c.peer.pid, idle);
    (void)proto::write_frame(fd, proto::error_reply(make_error(Errc::kBusy, "closed to make room for a new connection: idle for " +
                                                                  std::to_string(static_cast<int>(idle)) + " s")),
                             -1, deadline_in(1));
  } else if (e.code == Errc::kProtocol || (e.code == Errc::kTimeout && e.message.rfind("frame incomplete", 0) == 0)) {
    // Framing errors and frames that stopped arriving get the documented reply, the greeting included.
    spdlog::warn("client pid {}: {}; closing its connection", c.peer.pid, e.message);
    (void)proto::write_frame(fd, proto::error_reply(e), -1, deadline_in(1));
  }
}

void Server::serve_requests(Conn& c) {
  const int fd = c.fd.get();
  if (!proto::write_frame(fd, hello(), -1, deadline_in(kHelloTimeoutS)).ok()) return;
  auto greet = proto::read_frame(fd, deadline_in(kHelloTimeoutS));
  if (!greet.ok()) {
    read_failed(c, greet.error());
    return;
  }
  c.idle = false;
  if (greet->fd || greet->body.value("op", "") != "hello" || !greet->body.contains("protocol") ||
      greet->body["protocol"] != proto::kVersion) {
    (void)proto::write_frame(fd, proto::error_reply(make_error(Errc::kUnsupported,
                                 "expected hello with protocol " + std::to_string(proto::kVersion))), -1, deadline_in(1));
    return;
  }
  for (;;) {
    c.idle = c.publishing.empty();
    if (c.evicted) {  // chosen while it was busy answering: its wait ends at once
      read_failed(c, make_error(Errc::kCancelled, "evicted"));
      return;
    }
    const bool publishing = !c.publishing.empty();
    auto f = proto::read_frame(fd, publishing ? c.publish_deadline : deadline_in(kIdleTimeoutS));
    c.idle = false;
    if (!f.ok() && publishing && f.error().code == Errc::kTimeout && f.error().message.rfind("frame incomplete", 0) != 0) {
      // The publish holds memory and a slot that eviction cannot take back: it ends at its deadline.
      const auto e = make_error(Errc::kTimeout, "publish of " + c.publishing + " not committed within " +
                                                    std::to_string(static_cast<int>(m_opts.publish_timeout_s)) +
                                                    " s (--publish-timeout-s); aborted");
      spdlog::warn("client pid {}: {}; closing its connection", c.peer.pid, e.message);
      (void)proto::write_frame(fd, proto::error_reply(e), -1, deadline_in(1));
      return;
    }
    if (!f.ok()) {
      read_failed(c, f.error());
      return;
    }
    UniqueFd out_fd;
    json reply;
    c.sender = std::move(f->sender);
    c.senders_differ = f->senders_differ;
    if (f->fd) {
      reply = proto::error_reply(make_error(Errc::kProtocol, "requests must not carry file descriptors"));
    } else {
      reply = dispatch(c, f->body, &out_fd);
    }
    if (f->body.contains("id")) reply["id"] = f->body["id"];
    if (out_fd) reply["fd"] = true;
    c.idle_since_ns = steady_ns();  // before the reply goes: a client that saw it sees an ordered age
    Status sent;
    if (!c.raw_manifest.empty()) {
      // Attach is the hot path of a restart: the manifest (hundreds of tensors) was serialized once.
      std::string payload = reply.dump();
      payload.pop_back();
      payload += ",\"manifest\":" + c.raw_manifest + "}";
      c.raw_manifest.clear();
      sent = proto::write_payload(fd, payload, out_fd.get(), deadline_in(30));
    } else {
      sent = proto::write_frame(fd, reply, out_fd.get(), deadline_in(30));
    }
    if (!sent.ok()) return;
    if (f->body.value("op", "") == "shutdown" && reply.value("ok", false)) request_stop();
  }
}

json Server::dispatch(Conn& c, const json& req, UniqueFd* fd_out) {
  auto op_it = req.find("op");
  if (op_it == req.end() || !op_it->is_string())
    return proto::error_reply(make_error(Errc::kProtocol, "request has no string 'op'"));
  const std::string op = op_it->get<std::string>();
  Result<json> r = json::object();
  if (op == "status") r = do_status();
  else if (op == "attach") r = do_attach(c, req, fd_out);
  else if (op == "publish_begin") r = do_publish_begin(c, req, fd_out);
  else if (op == "publish_commit") r = do_publish_commit(c, req);
  else if (op == "publish_abort") { abort_publish(c); r = ok(); }
  else if (op == "preload") r = do_preload(req);
  else if (op == "evict") r = do_evict(req);
  else if (op == "arena_lease") r = do_arena_lease(c, req, fd_out);
  else if (op == "arena_release") r = do_arena_release(c, req);
  else if (op == "shutdown") { spdlog::info("shutdown requested by pid {}", c.peer.pid); r = ok(); }
  else if (op == "hello") r = make_error(Errc::kProtocol, "hello was already exchanged");
  else r = make_error(Errc::kProtocol, "unknown op '" + op.substr(0, 64) + "'");
  if (!r.ok()) {
    spdlog::info("{} from pid {} failed: {}", op.substr(0, 64), c.peer.pid, r.error().to_string());
    return proto::error_reply(r.error());
  }
  return *r;
}

json Server::do_status() {
  std::lock_guard lk(m_store.mutex());
  proto::DaemonStatus s;
  for (const auto& e : m_store.all()) s.entries.push_back(entry_status(*e));
  {
    std::lock_guard ck(m_conn_mu);
    s.clients = m_conns.size();
  }
  for (const auto& m : m_misses) s.misses.push_back({m.pid, m.uid, m.mode, m.unix_time});
  s.backend = m_backend.name();
  s.gpu_uuid = m_backend.gpu_uuid();
  s.gpu_name = m_backend.gpu_name();
  s.pid = ::getpid();
  s.held_bytes = m_store.held_bytes();
  s.stale_dropped = m_stale_dropped;
  s.arenas = m_arenas.status();
  for (const auto& a : s.arenas) s.arena_bytes += a.pool_bytes;
  return ok(proto::to_json(s));
}

Result<json> Server::do_attach(Conn& c, const json& req, UniqueFd* fd_out) {
  FR_ASSIGN(proto::Key key, proto::key_from_json(req.value("key", json()), "attach.key"));
  FR_ASSIGN(double wait_s, proto::get_double(req, "wait_s", "attach", 300.0));
  if (!(wait_s >= 0 && wait_s <= proto::kMaxWaitS))
    return make_error(Errc::kInvalidArgument, "attach.wait_s: outside 0..86400");
  // A waiting attach holds a slot that eviction cannot take back: the daemon's limit caps what it asks.
  const bool capped = wait_s > m_opts.attach_wait_limit_s;
  if (capped) wait_s = m_opts.attach_wait_limit_s;
  std::string mode = req.value("mode", "zero_copy");
  if (mode != "zero_copy" && mode != "copy") return make_error(Errc::kInvalidArgument, "attach.mode: not zero_copy or copy");
  const std::string fp = key.fingerprint();
  auto deadline = deadline_in(wait_s);

  std::unique_lock lk(m_store.mutex());
  auto miss = [&](std::string reason, std::vector<std::string> differs = {}) {
    spdlog::info("attach miss for pid {}: {}", c.peer.pid, reason);
    m_misses.push_back({c.peer.pid, c.peer.uid, reason, unix_now()});
    if (m_misses.size() > kMaxAttachRecords) m_misses.pop_front();
    return ok({{"result", "miss"}, {"reason", std::move(reason)}, {"differs", std::move(differs)}});
  };
  auto e = m_store.find(fp);
  if (e && !(e->key == key)) e = nullptr;  // a fingerprint collision is a miss, never a wrong entry
  if (!e) {
    auto near = m_store.closest(key);
    if (!near) return miss("no entries");
    auto d = proto::key_differences(key, near->key);
    std::string why = d.empty() ? "no matching entry" : d.front() + " differs";
    if (!d.empty() && d.front().find("time_ns") != std::string::npos) why += ": the file changed since it was loaded";
    if (!d.empty() && d.front().find(".ino") != std::string::npos) why += ": the file was replaced since it was loaded";
    return miss(why + (d.size() > 1 ? " (and " + std::to_string(d.size() - 1) + " more)" : ""), d);
  }
  while (e->state == EntryState::kLoading && !m_stopping && !e->cancel) {
    if (m_store.changed().wait_until(lk, deadline) == std::cv_status::timeout) break;
  }
  if (e->cancel || m_stopping) return miss("the entry was evicted while waiting");
  if (e->state == EntryState::kLoading)
    return miss("loading did not finish within " + std::to_string(static_cast<int>(wait_s)) + " s" +
                (capped ? " (the daemon's --attach-wait-limit-s)" : ""));
  if (e->state == EntryState::kFailed) return miss("entry failed to load: " + e->error);
  FR_ASSIGN(*fd_out, e->pool->share_fd());
  e->attaches.push_back({c.peer.pid, c.peer.uid, mode, unix_now()});
  if (e->attaches.size() > kMaxAttachRecords) e->attaches.pop_front();
  spdlog::info("attach hit {} for pid {} ({} bytes, {})", fp, c.peer.pid, e->manifest.data_bytes, mode);
  if (e->manifest_json.empty()) e->manifest_json = proto::to_json(e->manifest).dump();
  c.raw_manifest = e->manifest_json;
  return ok({{"result", "hit"}});
}

Result<json> Server::do_publish_begin(Conn& c, const json& req, UniqueFd* fd_out) {
  if (!c.publishing.empty()) return make_error(Errc::kBusy, "this connection is already publishing " + c.publishing);
  FR_ASSIGN(proto::Key key, proto::key_from_json(req.value("key", json()), "publish_begin.key"));
  auto ts = req.find("tensors");
  if (ts == req.end() || !ts->is_array() || ts->empty() || ts->size() > proto::kMaxTensors)
    return make_error(Errc::kInvalidArgument, "publish_begin.tensors: missing, empty or too long");
  std::vector<proto::TensorSpec> specs;
  for (size_t i = 0; i < ts->size(); ++i) {
    FR_ASSIGN(auto s, proto::tensor_spec_from_json((*ts)[i], "publish_begin.tensors[" + std::to_string(i) + "]"));
    specs.push_back(std::move(s));
  }
  FR_TRY(check_files_unchanged(key, "publish_begin: key"));
  drop_stale_entries("publish");
  auto e = std::make_shared<Entry>();
  e->key = key;
  e->fingerprint = key.fingerprint();
  e->source = "publish";
  e->publisher = c.id;
  for (const auto& f : key.files) e->files.push_back(f.path);
  e->manifest.data_bytes = proto::layout_tensors(specs, &e->manifest.tensors);
  e->progress.total_bytes = e->manifest.data_bytes;
  e->progress.started = std::chrono::steady_clock::now();
  {
    std::lock_guard lk(m_store.mutex());
    if (m_store.find(e->fingerprint)) return make_error(Errc::kBusy, "key " + e->fingerprint + " is already held or being published; evict it first");
  }
  FR_ASSIGN(e->pool, m_backend.allocate(std::max<uint64_t>(e->manifest.data_bytes, 1)));
  e->manifest.fingerprint = e->fingerprint;
  e->manifest.pool_bytes = e->pool->size();
  e->manifest.digest_chunk = kDigestChunkBytes;
  e->manifest.source = "publish";
  e->manifest.backend = m_backend.name();
  e->manifest.gpu_uuid = m_backend.gpu_uuid();
  FR_ASSIGN(*fd_out, e->pool->share_fd());
  json manifest = proto::to_json(e->manifest);
  {
    std::lock_guard lk(m_store.mutex());
    FR_TRY(m_store.insert(e));
  }
  c.publishing = e->fingerprint;
  c.publish_deadline = deadline_in(m_opts.publish_timeout_s);
  spdlog::info("publish of {} begun by pid {} ({} tensors, {} bytes)", e->fingerprint, c.peer.pid, specs.size(), e->manifest.data_bytes);
  return ok({{"manifest", std::move(manifest)}});
}

Result<json> Server::do_publish_commit(Conn& c, const json& req) {
  FR_ASSIGN(std::string fp, proto::get_string(req, "fingerprint", "publish_commit", 64));
  if (c.publishing != fp) return make_error(Errc::kNotFound, "publish_commit: this connection is not publishing " + fp);
  std::shared_ptr<Entry> e;
  {
    std::lock_guard lk(m_store.mutex());
    e = m_store.find(fp);
  }
  if (!e) return make_error(Errc::kNotFound, "publish_commit: entry " + fp + " is gone (evicted)");
  FR_TRY(e->pool->seal());
  FR_ASSIGN(uint64_t digest, e->pool->digest(e->manifest.data_bytes));
  {
    std::lock_guard lk(m_store.mutex());
    e->manifest.digest = digest;
    e->progress.done_bytes = e->manifest.data_bytes;
    e->progress.finished = std::chrono::steady_clock::now();
    e->state = EntryState::kReady;
    e->publisher = -1;
    m_store.changed().notify_all();
  }
  c.publishing.clear();
  spdlog::info("publish of {} committed by pid {}: digest {}", fp, c.peer.pid, digest_hex(digest));
  return ok({{"digest", digest_hex(digest)}, {"fingerprint", fp}});
}

void Server::abort_publish(Conn& c) {
  if (c.publishing.empty()) return;
  std::shared_ptr<Entry> e;
  {
    std::lock_guard lk(m_store.mutex());
    auto cur = m_store.find(c.publishing);
    if (cur && cur->publisher == c.id) e = m_store.remove(c.publishing);
  }
  if (e) spdlog::info("publish of {} by pid {} aborted", c.publishing, c.peer.pid);
  retire(std::move(e));
  c.publishing.clear();
}

void Server::drop_stale_entries(const char* before) {
  // stat(2) outside the lock: a slow file system must not hold up attaches.
  std::vector<std::pair<std::shared_ptr<Entry>, proto::Key>> candidates;
  {
    std::lock_guard lk(m_store.mutex());
    for (auto& e : m_store.all())
      if (e->state != EntryState::kLoading) candidates.emplace_back(e, e->key);
  }
  std::vector<std::pair<std::shared_ptr<Entry>, std::string>> stale;
  for (auto& [e, key] : candidates) {
    for (const auto& was : key.files) {
      auto now = identify_file(was.path);
      std::string why = now.ok() ? identity_change(was, *now) : "it can no longer be identified (" + now.error().message + ")";
      if (!why.empty()) {
        stale.emplace_back(e, was.path + ": " + why);
        break;
      }
    }
  }
  if (stale.empty()) return;
  std::vector<std::shared_ptr<Entry>> gone;
  {
    std::lock_guard lk(m_store.mutex());
    for (auto& [e, why] : stale) {
      // Still the same entry, still not loading (an evict and a new publish may have come in between).
      if (m_store.find(e->fingerprint) != e || e->state == EntryState::kLoading) continue;
      gone.push_back(m_store.remove(e->fingerprint));
      ++m_stale_dropped;
      // A mapping an engine still holds stays valid: it holds its own reference to the pool, whose memory
      // is freed when the last mapping goes (ARCHITECTURE.md, "Data flow").
      spdlog::info("dropped stale entry {} ({} bytes) before a {}: {}; no attach can match it again", e->fingerprint,
                   e->pool ? e->pool->size() : 0, before, why);
    }
  }
  for (auto& e : gone) retire(std::move(e));
}

Result<std::string> Server::preload(const PreloadRequest& req, bool wait) {
  FR_ASSIGN(PreloadPlan plan, plan_preload(req.files, req.tensors, req.dtype));
  drop_stale_entries("preload");
  auto e = std::make_shared<Entry>();
  e->key.files = plan.identities;
  e->key.config = req.config;
  e->fingerprint = e->key.fingerprint();
  e->source = "preload";
  for (const auto& f : plan.identities) e->files.push_back(f.path);
  {
    std::unique_lock lk(m_store.mutex());
    if (auto cur = m_store.find(e->fingerprint)) {
      if (wait) m_store.changed().wait(lk, [&] { return cur->state != EntryState::kLoading || cur->cancel.load(); });
      return e->fingerprint;
    }
  }
  FR_ASSIGN(e->pool, m_backend.allocate(std::max<uint64_t>(plan.data_bytes, 1)));
  e->manifest.fingerprint = e->fingerprint;
  e->manifest.pool_bytes = e->pool->size();
  e->manifest.data_bytes = plan.data_bytes;
  e->manifest.digest_chunk = kDigestChunkBytes;
  e->manifest.source = "preload";
  e->manifest.backend = m_backend.name();
  e->manifest.gpu_uuid = m_backend.gpu_uuid();
  e->manifest.tensors = plan.slots;
  e->progress.total_bytes = plan.data_bytes;
  e->progress.started = std::chrono::steady_clock::now();
  {
    std::lock_guard lk(m_store.mutex());
    FR_TRY(m_store.insert(e));
    Entry* raw = e.get();
    // The thread only touches the entry through `raw`: retire() joins it before the entry can go away.
    e->loader = std::thread([this, raw, plan = std::move(plan)] {
      auto digest = run_preload(plan, *raw->pool, raw->progress, raw->cancel, m_opts.reader_threads,
                                m_opts.test_read_hold);
      Status sealed = digest.ok() ? raw->pool->seal() : Status{};
      std::lock_guard lk2(m_store.mutex());
      raw->progress.finished = std::chrono::steady_clock::now();
      double s = std::chrono::duration<double>(raw->progress.finished - raw->progress.started).count();
      if (digest.ok() && sealed.ok()) {
        raw->manifest.digest = *digest;
        raw->state = EntryState::kReady;
        spdlog::info("preload {} ready: {} bytes in {:.3f} s ({:.2f} GB/s), digest {}", raw->fingerprint,
                     raw->manifest.data_bytes, s, static_cast<double>(raw->manifest.data_bytes) / s / 1e9, digest_hex(*digest));
      } else {
        raw->state = EntryState::kFailed;
        raw->error = digest.ok() ? sealed.error().message : digest.error().message;
        spdlog::error("preload {} failed: {}", raw->fingerprint, raw->error);
      }
      m_store.changed().notify_all();
    });
  }
  spdlog::info("preload {} started: {} files, {} tensors, {} bytes", e->fingerprint, e->files.size(),
               e->manifest.tensors.size(), e->manifest.data_bytes);
  if (wait) {
    std::unique_lock lk(m_store.mutex());
    m_store.changed().wait(lk, [&] { return e->state != EntryState::kLoading || e->cancel.load(); });
    if (e->state == EntryState::kFailed) return make_error(Errc::kCorrupt, "preload failed: " + e->error);
  }
  return e->fingerprint;
}

Result<json> Server::do_preload(const json& req) {
  PreloadRequest p;
  FR_ASSIGN(p.files, string_list(req, "files", "preload", proto::kMaxKeyFiles, true));
  FR_ASSIGN(p.tensors, string_list(req, "tensors", "preload", proto::kMaxTensors, false));
  if (auto cfg = req.find("config"); cfg != req.end()) {
    json k{{"files", json::array()}, {"config", *cfg}};
    FR_ASSIGN(proto::Key key, proto::key_from_json(k, "preload"));
    p.config = key.config;
  }
  if (auto dt = req.find("dtype"); dt != req.end() && !dt->is_null()) {
    if (!dt->is_string() || !dtype_from_name(dt->get<std::string>()))
      return make_error(Errc::kInvalidArgument, "preload.dtype: not a known dtype name");
    p.dtype = dtype_from_name(dt->get<std::string>());
  }
  FR_ASSIGN(bool wait, proto::get_bool(req, "wait", "preload", false));
  FR_ASSIGN(std::string fp, preload(p, wait));
  std::lock_guard lk(m_store.mutex());
  auto e = m_store.find(fp);
  return ok({{"fingerprint", fp}, {"state", e ? entry_state_name(e->state) : "failed"}});
}

Result<json> Server::do_evict(const json& req) {
  FR_ASSIGN(bool all, proto::get_bool(req, "all", "evict", false));
  std::vector<std::shared_ptr<Entry>> gone;
  {
    std::lock_guard lk(m_store.mutex());
    if (all) {
      for (const auto& e : m_store.all()) gone.push_back(m_store.remove(e->fingerprint));
    } else {
      FR_ASSIGN(std::string fp, proto::get_string(req, "fingerprint", "evict", 64));
      auto e = m_store.remove(fp);
      if (!e) return make_error(Errc::kNotFound, "evict: no entry " + fp);
      gone.push_back(std::move(e));
    }
  }
  uint64_t freed = 0;
  for (auto& e : gone) {
    freed += e->pool ? e->pool->size() : 0;
    spdlog::info("evicted {}", e->fingerprint);
    retire(std::move(e));
  }
  json reply{{"freed_bytes", freed}, {"evicted", gone.size()}};
  if (all) {
    // Arenas no live process holds go too; a held one stays (its holder maps it).
    ArenaEviction a = m_arenas.evict_unheld();
    reply["freed_bytes"] = freed + a.freed_bytes;
    reply["arenas_evicted"] = a.dropped;
    reply["arenas_kept"] = a.kept;
  }
  return ok(std::move(reply));
}

Result<json> Server::do_arena_lease(Conn& c, const json& req, UniqueFd* fd_out) {
  FR_ASSIGN(proto::ArenaLeaseRequest r, proto::arena_lease_from_json(req));
  const bool capped = r.wait_s > m_opts.attach_wait_limit_s;
  if (capped) r.wait_s = m_opts.attach_wait_limit_s;
  FR_ASSIGN(Requester who, requester_of(c.sender, c.senders_differ, c.fd.get(), "arena_lease"));
  auto g = m_arenas.lease(r, who, c.fd.get(), &c.lease_waiting);
  if (!g.ok()) {
    if (capped && g.error().code == Errc::kTimeout) return Error{g.error().code, g.error().message + " (capped by the daemon's --attach-wait-limit-s)"};
    return g.error();
  }
  *fd_out = std::move(g->fd);
  g->reply.backend = m_backend.name();
  return ok(proto::to_json(g->reply));
}

Result<json> Server::do_arena_release(Conn& c, const json& req) {
  FR_ASSIGN(proto::ArenaReleaseRequest r, proto::arena_release_from_json(req));
  FR_ASSIGN(Requester who, requester_of(c.sender, c.senders_differ, c.fd.get(), "arena_release"));
  FR_ASSIGN(uint64_t freed, m_arenas.release(r.name, who));
  return ok(proto::to_json(proto::ArenaReleaseReply{r.name, freed}));
}

}  // namespace fr::daemon
