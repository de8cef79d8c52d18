#include "daemon_client/daemon_client.h"

#include <thread>

#include "common/private_dir.h"

namespace fr {
namespace {

std::atomic<uint64_t> g_connect_retries{0};

std::string lock_of(const std::string& socket_path) {
  const std::string ext = ".sock";
  if (socket_path.size() > ext.size() && socket_path.compare(socket_path.size() - ext.size(), ext.size(), ext) == 0)
    return socket_path.substr(0, socket_path.size() - ext.size()) + ".lock";
  return socket_path + ".lock";
}

// One connect attempt per round; another round only while the daemon is starting (docs/protocol.md,
// "Transport": it holds its lock from before it binds until it exits).
Result<UniqueFd> connect_daemon(const std::string& path, Deadline deadline) {
  const std::string lock = lock_of(path);
  for (;;) {
    auto fd = connect_unix(path, Clock::now());
    if (fd.ok()) return fd;
    const bool absent = fd.error().code == Errc::kNotFound;
    const bool refused = fd.error().code == Errc::kTimeout;  // ECONNREFUSED, after a single attempt
    if (!absent && !refused) return fd.error();
    if (!LockFile::held(lock))
      return make_error(Errc::kNotFound, absent ? "no daemon: " + path + " does not exist and no daemon is starting (" + lock + " is not held)"
                                                : "no daemon: " + path + " refuses connections and no daemon holds " + lock + " (a stale socket)");
    if (Clock::now() >= deadline)
      return make_error(Errc::kTimeout, "the daemon holding " + lock + " is starting but " + path + " did not accept in time");
    g_connect_retries.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

uint64_t DaemonClient::connect_retries() { return g_connect_retries.load(std::memory_order_relaxed); }

Result<DaemonClient> DaemonClient::connect(const std::string& path, double timeout_s, const std::string& name) {
  auto deadline = deadline_in(timeout_s);
  DaemonClient c;
  FR_ASSIGN(c.m_fd, connect_daemon(path, deadline));
  auto hello = proto::read_frame(c.m_fd.get(), deadline);
  if (!hello.ok()) return hello.error().context("no greeting from the daemon at " + path);
  FR_TRY(hello->body.value("ok", true) ? Status{} : proto::check_reply(hello->body));  // refused: peer check
  if (hello->body.value("op", "") != "hello")
    return make_error(Errc::kProtocol, "daemon at " + path + " sent no hello");
  if (hello->body.value("protocol", 0u) != proto::kVersion)
    return make_error(Errc::kUnsupported, "daemon at " + path + " speaks protocol " +
                                              hello->body.value("protocol", proto::json(0)).dump() + ", we speak " +
                                              std::to_string(proto::kVersion));
  c.m_hello = std::move(hello->body);
  FR_TRY(proto::write_frame(c.m_fd.get(), {{"op", "hello"}, {"protocol", proto::kVersion}, {"client", name}}, -1, deadline));
  return c;
}

Result<proto::json> DaemonClient::call(const proto::json& req, double timeout_s, UniqueFd* fd) {
  auto deadline = deadline_in(timeout_s);
  FR_TRY(proto::write_frame(m_fd.get(), req, -1, deadline));
  auto r = proto::read_frame(m_fd.get(), deadline);
  if (!r.ok()) {
    if (r.error().code == Errc::kCancelled) return make_error(Errc::kIo, "the daemon closed the connection");
    return r.error();
  }
  FR_TRY(proto::check_reply(r->body));
  const bool claims = r->body.value("fd", false);
  if (claims != r->fd.valid())
    return make_error(Errc::kProtocol, claims ? "reply claims a descriptor that did not arrive" : "reply carried an unannounced descriptor");
  if (fd) *fd = std::move(r->fd);
  return std::move(r->body);
}

}  // namespace fr
