#include "engine_loader/client.h"

namespace fr::loader {

Result<DaemonClient> DaemonClient::connect(const std::string& path, double timeout_s, const std::string& name) {
  auto deadline = deadline_in(timeout_s);
  DaemonClient c;
  FR_ASSIGN(c.m_fd, connect_unix(path, deadline));
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

}  // namespace fr::loader
