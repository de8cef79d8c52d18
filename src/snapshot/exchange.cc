#include "snapshot/exchange.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/bounded_json.h"
#include "common/unix_socket.h"
#include "daemon_client/daemon_client.h"
#include "protocol/daemon_status.h"

namespace fr::snapshot {

using nlohmann::json;

namespace {

constexpr const char* kHostPoolName = "/memfd:fastrestart-pool";

}  // namespace

Result<json> exchange(const std::string& socket, const std::string& op, double timeout_s) {
  const auto deadline = deadline_in(timeout_s);
  // No retries for a missing socket: an engine that serves the exchange listens before it is ready.
  auto fd = connect_unix(socket, deadline_in(0));
  if (!fd.ok())
    return make_error(Errc::kUnsupported, "the engine does not answer the snapshot exchange at " + socket + " (" +
                                              fd.error().message + ")");
  const std::string line = json{{"op", op}}.dump() + "\n";
  FR_TRY(send_all(fd->get(), line.data(), line.size(), {}, deadline));
  std::string reply;
  while (reply.size() < (1 << 20) && (reply.empty() || reply.back() != '\n')) {
    char c;
    if (auto s = recv_exact(fd->get(), &c, 1, nullptr, deadline); !s.ok())
      return make_error(Errc::kIo, "snapshot exchange " + op + " at " + socket + ": " + s.error().message);
    reply += c;
  }
  auto parsed = parse_json_bounded(reply, {32, 65536, "the reply"});
  if (!parsed.ok()) return make_error(Errc::kProtocol, "snapshot exchange " + op + " at " + socket + ": " + parsed.error().message);
  json j = std::move(*parsed);
  if (!j.is_object()) return make_error(Errc::kProtocol, "snapshot exchange " + op + " at " + socket + ": not a JSON object");
  if (!j.value("ok", false))
    return make_error(Errc::kIo, "the engine refused " + op + ": " + j.value("error", std::string("no reason given")));
  if (!j.contains("weights") || !j["weights"].is_array())
    return make_error(Errc::kProtocol, "snapshot exchange " + op + " at " + socket + ": the reply has no \"weights\" array");
  // "arenas" came later: an engine without KV arenas may leave it out.
  if (!j.contains("arenas")) j["arenas"] = json::array();
  if (!j["arenas"].is_array())
    return make_error(Errc::kProtocol, "snapshot exchange " + op + " at " + socket + ": \"arenas\" is not an array");
  for (const auto& a : j["arenas"])
    if (!a.is_object() || !a.contains("name") || !a["name"].is_string() || !a.contains("mapped") || !a["mapped"].is_boolean())
      return make_error(Errc::kProtocol, "snapshot exchange " + op + " at " + socket + ": an \"arenas\" entry without a name or mapped: " +
                                             a.dump().substr(0, 200));
  return j;
}

Status verify_released(pid_t pid, const json& released, const json& arenas) {
  const std::string base = "/proc/" + std::to_string(pid);
  struct Line {
    uintptr_t lo, hi;
    std::string perms, text;
  };
  std::vector<Line> lines;
  {
    std::ifstream maps(base + "/maps");
    if (!maps) return make_error(Errc::kIo, "cannot read " + base + "/maps");
    for (std::string l; std::getline(maps, l);) {
      Line x{0, 0, "", l};
      char perms[8] = {0};
      unsigned long lo = 0, hi = 0;
      if (std::sscanf(l.c_str(), "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
      x.lo = lo;
      x.hi = hi;
      x.perms = perms;
      if (l.find(kHostPoolName) != std::string::npos)
        return make_error(Errc::kUnsupported, "pid " + std::to_string(pid) + " still maps a weight pool: " + l);
      lines.push_back(std::move(x));
    }
  }
  if (DIR* d = ::opendir((base + "/fd").c_str())) {
    char target[256];
    std::string held;
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      ssize_t n = ::readlinkat(::dirfd(d), e->d_name, target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = 0;
      if (std::string(target).rfind(kHostPoolName, 0) == 0) held = std::string(e->d_name) + " -> " + target;
    }
    ::closedir(d);
    if (!held.empty()) return make_error(Errc::kUnsupported, "pid " + std::to_string(pid) + " holds a weight pool open: fd " + held);
  }
  auto check = [&](const json& w, const std::string& what) -> Status {
    if (w.value("mapped", true)) return make_error(Errc::kUnsupported, "the engine reports " + what + " still mapped");
    if (w.value("device", std::string()).rfind("host", 0) != 0) return {};
    const uintptr_t lo = w.value("base", uintptr_t{0}), hi = lo + w.value("bytes", uint64_t{0});
    for (const auto& l : lines)
      if (l.lo < hi && lo < l.hi && l.perms.rfind("---", 0) != 0)
        return make_error(Errc::kUnsupported, what + " released, but its range is still accessible: " + l.text);
    return {};
  };
  for (const auto& w : released) FR_TRY(check(w, "weights " + w.value("fingerprint", std::string("?"))));
  for (const auto& a : arenas) FR_TRY(check(a, "KV arena '" + a.value("name", std::string("?")) + "'"));
  return {};
}

Status daemon_holds(const json& entry, double timeout_s) {
  const std::string sock = entry.value("daemon_socket", std::string());
  const std::string fp = entry.value("fingerprint", std::string()), dg = entry.value("digest", std::string());
  const std::string what = "the weight daemon at " + sock + " does not hold the weights this snapshot excludes (fingerprint " +
                           fp + ", digest " + dg + ")";
  auto c = DaemonClient::connect(sock, timeout_s, "fastrestart-snapshot");
  if (!c.ok()) return make_error(Errc::kNotFound, what + ": " + c.error().message);
  const auto deadline = deadline_in(timeout_s);
  for (;;) {
    auto reply = c->call({{"op", "status"}}, timeout_s);
    if (!reply.ok()) return make_error(Errc::kNotFound, what + ": status: " + reply.error().message);
    auto st = proto::daemon_status_from_json(*reply);
    if (!st.ok()) return make_error(Errc::kNotFound, what + ": status: " + st.error().message);
    std::string seen;
    bool loading = false;
    for (const auto& e : st->entries) {
      const std::string& efp = e.fingerprint;
      const std::string state = e.state.empty() ? "?" : e.state;
      const std::string edg = e.digest.value_or("");
      if (efp == fp && state == "ready" && edg == dg) return {};
      loading = loading || (efp == fp && state == "loading");
      seen += (seen.empty() ? "" : ", ") + efp + " (" + state + (edg.empty() ? "" : ", digest " + edg) + ")";
    }
    // A daemon that is (re)loading these weights gets until the deadline to finish.
    if (!loading || Clock::now() >= deadline)
      return make_error(Errc::kNotFound, what + ": it holds " + (seen.empty() ? std::string("no entries") : seen));
    ::usleep(50'000);
  }
}

}  // namespace fr::snapshot
