#include "daemon/arena.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include <spdlog/spdlog.h>

namespace fr::daemon {
namespace {

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

using SteadyClock = std::chrono::steady_clock;

double seconds_since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// True when `pidfd` is readable: the process has exited.
bool exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP));
}

std::string names_text(const std::set<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

Result<Requester> requester_of(const MessageSender& sender, bool senders_differ, int sock, const char* op) {
  const std::string w = op;
  if (senders_differ)
    return make_error(Errc::kPermissionDenied, w + ": the request's bytes came from more than one process; refused");
  if (!sender.has_cred)
    return make_error(Errc::kPermissionDenied, w + ": the kernel attached no credentials to the request (SO_PASSCRED); refused");
  if (sender.pid <= 0)
    return make_error(Errc::kPermissionDenied, w + ": the requester's pid is not visible to the daemon (another pid namespace)");
  Requester r;
  r.pid = sender.pid;
  r.uid = sender.uid;
  if (sender.has_pidfd) {
    // SCM_PIDFD names the sender of this very message; no pidfd in it: the sender was already reaped.
    if (!sender.pidfd) return make_error(Errc::kPermissionDenied, w + ": the requesting process (pid " + std::to_string(r.pid) + ") has exited");
    r.pidfd.reset(::fcntl(sender.pidfd.get(), F_DUPFD_CLOEXEC, 0));
    if (!r.pidfd) return sys_error(w + ": dup the requester's pidfd");
  } else {
    // No SCM_PIDFD: the connecting process's pidfd stands for the sender only when it is the same pid,
    // which SCM_CREDENTIALS gives per message. A fork of the connector fails this, as it must.
    int fd = -1;
    socklen_t len = sizeof fd;
    if (::getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) != 0 || fd < 0)
      return make_error(Errc::kPermissionDenied, w + ": this kernel cannot name the process that sent a request (no SCM_PIDFD or "
                                                     "SO_PEERPIDFD, Linux 6.5); arena leases are refused rather than guessed");
    r.pidfd.reset(fd);
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    auto pid = pidfd_pid(fd);
    if (!pid.ok()) return pid.error().context(w + ": the connecting process's pidfd");
    if (*pid != r.pid)
      return make_error(Errc::kPermissionDenied, w + ": sent by pid " + std::to_string(r.pid) + ", which is not the process that connected (pid " +
                                                     std::to_string(*pid) + "), and this kernel has no SCM_PIDFD to name it; refused");
  }
  if (exited(r.pidfd.get()))
    return make_error(Errc::kPermissionDenied, w + ": the requesting process (pid " + std::to_string(r.pid) + ") has exited");
  return r;
}

ArenaTable::ArenaTable(Backend& backend, ArenaPolicy policy) : m_backend(backend), m_policy(std::move(policy)) {
  // Without the pipe (no descriptors left) waiters still end at their deadline or their requester's hang-up.
  int p[2];
  if (::pipe2(p, O_CLOEXEC) == 0) m_stop_r.reset(p[0]), m_stop_w.reset(p[1]);
}

ArenaTable::~ArenaTable() { stop(); }

void ArenaTable::stop() {
  std::lock_guard lk(m_mu);
  m_stopping = true;
  m_stop_w.reset();  // every poll on m_stop_r sees POLLHUP
}

bool ArenaTable::holder_gone(Arena& a) {
  if (!a.holder) return true;
  if (!a.holder_pidfd || !exited(a.holder_pidfd->get())) return false;
  spdlog::info("arena {}: holder pid {} exited", a.name, *a.holder);
  a.holder.reset();
  a.holder_pidfd.reset();
  return true;
}

Status ArenaTable::allowed(const std::string& name, const Requester& who, const char* op) const {
  if (who.uid != m_policy.uid)
    return make_error(Errc::kPermissionDenied, std::string(op) + ": uid " + std::to_string(who.uid) + " (pid " + std::to_string(who.pid) +
                                                   ") may not use arenas: they belong to uid " + std::to_string(m_policy.uid) + " (--arena-uid)");
  if (!m_policy.names.empty() && !m_policy.names.count(name))
    return make_error(Errc::kPermissionDenied, std::string(op) + ".name '" + name + "': not one of this daemon's arenas (--arena-name: " +
                                                   names_text(m_policy.names) + ")");
  return {};
}

uint64_t ArenaTable::bytes_except(const std::string& name) const {
  uint64_t n = 0;
  for (const auto& [k, a] : m_arenas)
    if (k != name && a.pool) n += a.pool->size();
  return n;
}

Result<ArenaGrant> ArenaTable::lease(const proto::ArenaLeaseRequest& req, const Requester& who, int sock,
                                     std::atomic<bool>* waiting) {
  const auto t0 = SteadyClock::now();
  const auto deadline = t0 + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(req.wait_s));
  FR_TRY(allowed(req.name, who, "arena_lease"));
  std::optional<pid_t> waited_for;
  uint64_t ticket = 0;

  std::unique_lock lk(m_mu);
  for (;;) {
    if (m_stopping) return make_error(Errc::kCancelled, "arena_lease: the daemon is shutting down");
    auto it = m_arenas.find(req.name);
    if (it == m_arenas.end()) {
      if (m_arenas.size() >= m_policy.max_arenas)
        return make_error(Errc::kBusy, "arena_lease: the daemon holds its maximum of " + std::to_string(m_policy.max_arenas) +
                                           " arenas (--max-arenas); no arena '" + req.name + "'");
      it = m_arenas.emplace(req.name, Arena{}).first;
      it->second.name = req.name;
      if (ticket) it->second.wait_ticket = ticket;  // released while this lease waited: still the waiter
    }
    Arena& a = it->second;
    if (ticket && a.wait_ticket != ticket)
      return make_error(Errc::kCancelled, "arena_lease: superseded by a newer lease request for arena '" + req.name + "'");
    if (holder_gone(a)) break;
    if (*a.holder == who.pid) {  // the holder itself (alive: its pidfd says so): the same memory again
      if (a.bytes != req.bytes)
        return make_error(Errc::kBusy, "arena_lease.bytes: arena '" + req.name + "' is leased to this process with " +
                                           std::to_string(a.bytes) + " bytes; another size waits for its exit");
      break;
    }
    waited_for = a.holder;
    if (SteadyClock::now() >= deadline) {
      const pid_t h = *a.holder;
      if (ticket && a.wait_ticket == ticket) a.wait_ticket = 0;
      return make_error(Errc::kTimeout, "arena_lease.wait_s: arena '" + req.name + "' is still leased to pid " +
                                            std::to_string(h) + ", alive after " + fmt::format("{:g}", req.wait_s) + " s");
    }
    if (!ticket) {
      // One waiting lease per arena: this one supersedes any that waits (it notices within a second).
      ticket = ++m_tickets;
      if (a.wait_ticket) spdlog::info("arena {}: a lease from pid {} supersedes the one waiting", a.name, who.pid);
      a.wait_ticket = ticket;
    }
    auto pidfd = a.holder_pidfd;
    ++a.waiting;
    if (waiting) *waiting = true;
    lk.unlock();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
    pollfd fds[4] = {{pidfd->get(), POLLIN, 0}, {sock, POLLRDHUP, 0}, {m_stop_r.get(), POLLIN, 0}, {who.pidfd.get(), POLLIN, 0}};
    const int r = ::poll(fds, 4, static_cast<int>(std::clamp<int64_t>(left + 1, 0, 1000)));
    lk.lock();
    if (waiting) *waiting = false;
    auto w = m_arenas.find(req.name);
    if (w != m_arenas.end()) --w->second.waiting;
    const bool hung_up = r > 0 && (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR));
    const bool requester_exited = r > 0 && (fds[3].revents & (POLLIN | POLLHUP));
    if (hung_up || requester_exited) {
      if (w != m_arenas.end() && w->second.wait_ticket == ticket) w->second.wait_ticket = 0;
      return make_error(Errc::kCancelled, hung_up ? "arena_lease: the requester hung up while waiting"
                                                  : "arena_lease: the requesting process exited while waiting");
    }
  }
  if (exited(who.pidfd.get()))
    return make_error(Errc::kPermissionDenied, "arena_lease: the requesting process (pid " + std::to_string(who.pid) + ") has exited");

  Arena& a = m_arenas.at(req.name);
  if (a.wait_ticket == ticket) a.wait_ticket = 0;
  auto drop_if_empty = [&] {
    if (!a.pool && !a.holder && a.waiting == 0) m_arenas.erase(req.name);
  };
  ArenaGrant grant;
  proto::ArenaLeaseReply& g = grant.reply;
  g.name = req.name;
  if (a.pool && a.bytes != req.bytes) {
    g.resized = true;
    g.previous_bytes = a.bytes;
    spdlog::info("arena {}: size {} -> {} bytes: dropping the old arena", a.name, a.bytes, req.bytes);
    a.pool.reset();
  }
  if (!a.pool) {
    const uint64_t others = bytes_except(req.name);
    if (others + req.bytes > m_policy.max_bytes || others + req.bytes < others) {
      const std::string msg = "arena_lease.bytes: " + std::to_string(req.bytes) + " bytes for arena '" + req.name + "' beyond the daemon's budget of " +
                              std::to_string(m_policy.max_bytes) + " bytes for all arenas (--max-arena-bytes; " + std::to_string(others) + " held)";
      drop_if_empty();
      return make_error(Errc::kBusy, msg);
    }
    auto pool = m_backend.allocate(req.bytes);
    Status fixed = pool.ok() ? (*pool)->fix_size() : Status{};
    if (!pool.ok() || !fixed.ok()) {
      Error e = pool.ok() ? fixed.error() : pool.error();
      drop_if_empty();
      return e.context("arena_lease: creating arena '" + req.name + "' of " + std::to_string(req.bytes) + " bytes");
    }
    if (others + (*pool)->size() > m_policy.max_bytes) {
      drop_if_empty();
      return make_error(Errc::kBusy, "arena_lease.bytes: arena '" + req.name + "' rounds up to " + std::to_string((*pool)->size()) +
                                         " bytes, beyond the daemon's budget of " + std::to_string(m_policy.max_bytes) +
                                         " bytes for all arenas (--max-arena-bytes)");
    }
    a.pool = std::move(*pool);
    a.bytes = req.bytes;
    a.generation = 0;
    a.leases = 0;
    a.last_uid = who.uid;
    g.created = true;
  }
  if (a.last_uid && *a.last_uid != who.uid) {
    // Not the warm path: a lease by the same uid keeps the bytes (the restarted engine's KV cache).
    FR_TRY(a.pool->zero());
    spdlog::info("arena {}: cleared for uid {} (its last holder ran as uid {})", a.name, who.uid, *a.last_uid);
    g.zeroed = true;
  }
  a.last_uid = who.uid;
  FR_ASSIGN(grant.fd, a.pool->share_fd());
  if (!a.holder) {
    a.holder = who.pid;
    a.holder_pidfd = std::make_shared<UniqueFd>(::fcntl(who.pidfd.get(), F_DUPFD_CLOEXEC, 0));
    if (!*a.holder_pidfd) {
      a.holder.reset();
      a.holder_pidfd.reset();
      return sys_error("arena_lease: keep the holder's pidfd");
    }
  }
  ++a.leases;
  ++a.generation;
  g.bytes = a.bytes;
  g.pool_bytes = a.pool->size();
  g.leases = a.leases;
  g.generation = a.generation;
  if (waited_for) g.previous_holder_pid = *waited_for;
  g.waited_s = waited_for ? seconds_since(t0) : 0.0;
  if (waited_for) a.last_wait_s = g.waited_s;
  spdlog::info("arena {} leased to pid {} uid {} ({} bytes{}{}, lease {}{})", a.name, who.pid, who.uid, a.bytes, g.created ? ", new" : "",
               g.resized ? ", resized" : "", a.leases,
               waited_for ? fmt::format(", after {:.3f} s waiting for pid {}'s exit", g.waited_s, *waited_for) : "");
  return grant;
}

Result<uint64_t> ArenaTable::release(const std::string& name, const Requester& who) {
  FR_TRY(allowed(name, who, "arena_release"));
  std::lock_guard lk(m_mu);
  auto it = m_arenas.find(name);
  if (it == m_arenas.end() || !it->second.pool) return make_error(Errc::kNotFound, "arena_release: no arena '" + name + "'");
  Arena& a = it->second;
  if (!holder_gone(a) && *a.holder != who.pid)
    return make_error(Errc::kBusy, "arena_release: arena '" + name + "' is leased to pid " + std::to_string(*a.holder) + ", which is alive");
  const uint64_t n = a.pool->size();
  spdlog::info("arena {} released by pid {} ({} bytes)", name, who.pid, n);
  // A lease waiting on it makes a new arena when it wakes; the holder's own mappings stay valid.
  m_arenas.erase(it);
  return n;
}

ArenaEviction ArenaTable::evict_unheld() {
  std::lock_guard lk(m_mu);
  ArenaEviction e;
  for (auto it = m_arenas.begin(); it != m_arenas.end();) {
    Arena& a = it->second;
    if (!a.pool || !holder_gone(a)) {
      if (a.pool) e.kept.push_back(a.name);
      ++it;
      continue;
    }
    ++e.dropped;
    e.freed_bytes += a.pool->size();
    spdlog::info("evicted arena {} ({} bytes)", a.name, a.pool->size());
    it = m_arenas.erase(it);
  }
  return e;
}

std::vector<proto::DaemonArenaStatus> ArenaTable::status() {
  std::lock_guard lk(m_mu);
  std::vector<proto::DaemonArenaStatus> v;
  for (auto& [name, a] : m_arenas) {
    if (!a.pool) continue;  // being made by its first lease
    holder_gone(a);
    proto::DaemonArenaStatus s;
    s.name = name;
    s.bytes = a.bytes;
    s.pool_bytes = a.pool->size();
    if (a.holder) s.holder_pid = *a.holder;
    s.leases = a.leases;
    s.generation = a.generation;
    s.waiting = a.waiting;
    s.last_wait_s = a.last_wait_s;
    v.push_back(std::move(s));
  }
  return v;
}

uint64_t ArenaTable::held_bytes() {
  std::lock_guard lk(m_mu);
  uint64_t n = 0;
  for (const auto& [name, a] : m_arenas) n += a.pool ? a.pool->size() : 0;
  return n;
}

}  // namespace fr::daemon
