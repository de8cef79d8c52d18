#include "supervisor/control.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <spdlog/spdlog.h>
#include <vector>

#include "common/private_dir.h"
#include "common/unix_socket.h"
#include "protocol/frame.h"

namespace fr::supervisor {

std::string default_control_socket(const std::string& name) { return default_socket_dir() + "/" + name + ".ctl"; }

Result<std::unique_ptr<ControlServer>> ControlServer::start(const std::string& path, std::optional<gid_t> group, Handler h) {
  std::unique_ptr<ControlServer> s(new ControlServer);
  s->m_path = path;
  s->m_group = group;
  s->m_handler = std::move(h);
  FR_TRY(ensure_private_dir(std::filesystem::path(path).parent_path().string(), group));
  ::unlink(path.c_str());
  FR_ASSIGN(s->m_listen, listen_unix(path, group ? 0660 : 0600));
  if (group && ::chown(path.c_str(), static_cast<uid_t>(-1), *group) != 0) return sys_error("chown " + path);
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return sys_error("pipe");
  s->m_wake_r.reset(p[0]);
  s->m_wake_w.reset(p[1]);
  ControlServer* raw = s.get();
  s->m_thread = std::thread([raw] { raw->serve(); });
  return s;
}

ControlServer::~ControlServer() {
  if (m_wake_w) (void)!::write(m_wake_w.get(), "x", 1);
  if (m_thread.joinable()) m_thread.join();
  ::unlink(m_path.c_str());
}

void ControlServer::serve() {
  std::vector<std::unique_ptr<Connection>> conns;
  for (;;) {
    pollfd p[2] = {{m_listen.get(), POLLIN, 0}, {m_wake_r.get(), POLLIN, 0}};
    // The timeout bounds how long a finished connection keeps its fd and thread when no client comes.
    const int r = ::poll(p, 2, 1000);
    reap(conns, false);
    if (r < 0) continue;
    if (p[1].revents) break;
    if (!(p[0].revents & POLLIN)) continue;
    UniqueFd fd(::accept4(m_listen.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd) continue;
    auto cred = peer_cred(fd.get());
    bool allowed = cred.ok() && (cred->uid == ::geteuid() || (m_group && peer_in_group(*cred, *m_group)));
    if (!allowed) {
      spdlog::warn("control: refused pid {} uid {}", cred.ok() ? cred->pid : -1, cred.ok() ? static_cast<long>(cred->uid) : -1L);
      (void)proto::write_frame(fd.get(), proto::error_reply(make_error(Errc::kPermissionDenied, "peer uid not allowed")), -1, deadline_in(1));
      continue;
    }
    auto c = std::make_unique<Connection>();
    c->fd = std::move(fd);
    Connection* raw = c.get();
    c->thread = std::thread([this, raw] { serve_connection(*raw); });
    conns.push_back(std::move(c));
  }
  reap(conns, true);
}

void ControlServer::serve_connection(Connection& c) {
  for (;;) {
    auto f = proto::read_frame(c.fd.get(), deadline_in(7 * 86400.0), proto::kFrameTimeoutS, proto::kControlFrameLimits);
    if (!f.ok()) {
      if (f.error().code == Errc::kProtocol)
        (void)proto::write_frame(c.fd.get(), proto::error_reply(f.error()), -1, deadline_in(1));
      break;
    }
    nlohmann::json reply = m_handler(f->body);
    if (!proto::write_frame(c.fd.get(), reply, -1, deadline_in(10)).ok()) break;
  }
  c.done = true;
}

void ControlServer::reap(std::vector<std::unique_ptr<Connection>>& conns, bool all) {
  for (auto it = conns.begin(); it != conns.end();) {
    Connection& c = **it;
    if (!all && !c.done) {
      ++it;
      continue;
    }
    if (!c.done) ::shutdown(c.fd.get(), SHUT_RDWR);
    c.thread.join();
    it = conns.erase(it);  // closes the fd
  }
}

}  // namespace fr::supervisor
