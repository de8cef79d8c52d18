#include "daemon/arena.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

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

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > kMaxArenaName) return false;
  for (char ch : s)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.' || ch == '-')) return false;
  return true;
}

// True when `pidfd` is readable: the process has exited.
bool exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP));
}

}  // namespace

Result<ArenaLeaseRequest> arena_lease_from_json(const proto::json& req) {
  ArenaLeaseRequest r;
  auto name = req.find("name");
  if (name == req.end()) return make_error(Errc::kInvalidArgument, "arena_lease.name: missing");
  if (!name->is_string() || !valid_name(name->get_ref<const std::string&>()))
    return make_error(Errc::kInvalidArgument, "arena_lease.name: not 1-64 of A-Z a-z 0-9 _ . -");
  r.name = name->get<std::string>();
  auto bytes = req.find("bytes");
  if (bytes == req.end()) return make_error(Errc::kInvalidArgument, "arena_lease.bytes: missing");
  if (!bytes->is_number_unsigned() || bytes->get<uint64_t>() == 0 || bytes->get<uint64_t>() > kMaxArenaBytes)
    return make_error(Errc::kInvalidArgument, "arena_lease.bytes: not an integer in 1.." + std::to_string(kMaxArenaBytes));
  r.bytes = bytes->get<uint64_t>();
  FR_ASSIGN(r.wait_s, proto::get_double(req, "wait_s", "arena_lease", 30.0));
  if (!(r.wait_s >= 0 && r.wait_s <= proto::kMaxWaitS))
    return make_error(Errc::kInvalidArgument, "arena_lease.wait_s: outside 0..86400");
  return r;
}

Result<UniqueFd> peer_pidfd(int sock, pid_t pid) {
  int fd = -1;
  socklen_t len = sizeof fd;
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) == 0 && fd >= 0) {
    // Not close-on-exec by default on every kernel that has it.
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    return UniqueFd(fd);
  }
  if (pid <= 0) return make_error(Errc::kPermissionDenied, "the requester's pid is not visible to the daemon (another pid namespace)");
  UniqueFd p(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!p) return sys_error("pidfd_open(" + std::to_string(pid) + ")");
  return p;
}

ArenaTable::ArenaTable(Backend& backend, size_t max_arenas) : m_backend(backend), m_max(max_arenas) {
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

Result<ArenaGrant> ArenaTable::lease(const ArenaLeaseRequest& req, pid_t peer_pid, int sock) {
  const auto t0 = SteadyClock::now();
  const auto deadline = t0 + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(req.wait_s));
  // A peer in a pid namespace the daemon cannot see has pid 0: two of them would count as one holder.
  if (peer_pid <= 0)
    return make_error(Errc::kPermissionDenied, "arena_lease: the requester's pid is not visible to the daemon (another pid namespace)");
  // Opened before the wait: the grant must name this process even if it hung up meanwhile.
  FR_ASSIGN(UniqueFd mine, peer_pidfd(sock, peer_pid));
  std::optional<pid_t> waited_for;

  std::unique_lock lk(m_mu);
  for (;;) {
    if (m_stopping) return make_error(Errc::kCancelled, "arena_lease: the daemon is shutting down");
    auto it = m_arenas.find(req.name);
    if (it == m_arenas.end()) {
      if (m_arenas.size() >= m_max)
        return make_error(Errc::kBusy, "arena_lease: the daemon holds its maximum of " + std::to_string(m_max) +
                                           " arenas (--max-arenas); no arena '" + req.name + "'");
      it = m_arenas.emplace(req.name, Arena{}).first;
      it->second.name = req.name;
    }
    Arena& a = it->second;
    if (holder_gone(a)) break;
    if (*a.holder == peer_pid) {  // the holder itself (alive: its pidfd says so): the same memory again
      if (a.bytes != req.bytes)
        return make_error(Errc::kBusy, "arena_lease.bytes: arena '" + req.name + "' is leased to this process with " +
                                           std::to_string(a.bytes) + " bytes; another size waits for its exit");
      break;
    }
    waited_for = a.holder;
    if (SteadyClock::now() >= deadline) {
      const pid_t h = *a.holder;
      return make_error(Errc::kTimeout, "arena_lease.wait_s: arena '" + req.name + "' is still leased to pid " +
                                            std::to_string(h) + ", alive after " + fmt::format("{:g}", req.wait_s) + " s");
    }
    auto pidfd = a.holder_pidfd;
    ++a.waiting;
    lk.unlock();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
    pollfd fds[3] = {{pidfd->get(), POLLIN, 0}, {sock, POLLRDHUP, 0}, {m_stop_r.get(), POLLIN, 0}};
    const int r = ::poll(fds, 3, static_cast<int>(std::clamp<int64_t>(left + 1, 0, 1000)));
    lk.lock();
    if (auto w = m_arenas.find(req.name); w != m_arenas.end()) --w->second.waiting;
    if (r > 0 && (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
      return make_error(Errc::kCancelled, "arena_lease: the requester hung up while waiting");
  }

  Arena& a = m_arenas.at(req.name);
  ArenaGrant g;
  if (a.pool && a.bytes != req.bytes) {
    g.resized_from = a.bytes;
    spdlog::info("arena {}: size {} -> {} bytes: dropping the old arena", a.name, a.bytes, req.bytes);
    a.pool.reset();
  }
  if (!a.pool) {
    auto pool = m_backend.allocate(req.bytes);
    if (!pool.ok()) {
      if (!a.holder && a.waiting == 0) m_arenas.erase(req.name);
      return pool.error().context("arena_lease: creating arena '" + req.name + "' of " + std::to_string(req.bytes) + " bytes");
    }
    a.pool = std::move(*pool);
    a.bytes = req.bytes;
    a.generation = 0;
    a.leases = 0;
    g.created = true;
  }
  FR_ASSIGN(g.fd, a.pool->share_fd());
  if (!a.holder) {
    a.holder = peer_pid;
    a.holder_pidfd = std::make_shared<UniqueFd>(std::move(mine));
  }
  ++a.leases;
  ++a.generation;
  g.bytes = a.bytes;
  g.pool_bytes = a.pool->size();
  g.leases = a.leases;
  g.generation = a.generation;
  g.previous_holder = waited_for;
  g.waited_s = waited_for ? seconds_since(t0) : 0.0;
  if (waited_for) a.last_wait_s = g.waited_s;
  spdlog::info("arena {} leased to pid {} ({} bytes{}{}, lease {}{})", a.name, peer_pid, a.bytes, g.created ? ", new" : "",
               g.resized_from ? ", resized" : "", a.leases,
               waited_for ? fmt::format(", after {:.3f} s waiting for pid {}'s exit", g.waited_s, *waited_for) : "");
  return g;
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
