#include "supervisor/attach_seen.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "daemon_client/daemon_client.h"
#include "protocol/daemon_status.h"

namespace fr::supervisor {

AttachSeen attach_seen(const std::vector<std::string>& sockets, pid_t pgid, double since_unix) {
  AttachSeen seen;
  auto ours = [&](const proto::DaemonClientRecord& rec) {
    const auto p = static_cast<pid_t>(rec.pid);
    return rec.unix_time >= since_unix && (p == pgid || (p > 0 && ::getpgid(p) == pgid));
  };
  for (const auto& s : sockets) {
    auto c = DaemonClient::connect(s, 1.0, "fastrestartd");
    if (!c.ok()) continue;
    auto reply = c->call({{"op", "status"}}, 5);
    if (!reply.ok()) continue;
    auto st = proto::daemon_status_from_json(*reply);
    if (!st.ok()) {
      spdlog::warn("{}: unreadable status: {}", s, st.error().message);
      continue;
    }
    for (const auto& en : st->entries)
      for (const auto& a : en.attaches)
        if (ours(a)) seen.hit = true;
    for (const auto& m : st->misses)
      if (ours(m)) seen.miss = m.mode.empty() ? "miss" : m.mode;
  }
  return seen;
}

}  // namespace fr::supervisor
