#include "supervisor/instance_claims.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>

#include "common/io.h"
#include "common/unix_socket.h"
#include "supervisor/proc_stat.h"
#include "supervisor/port_owner.h"
#include "supervisor/state_files.h"

namespace fr::supervisor {
namespace {

constexpr const char* kInstanceLockName = "fastrestartd.lock";

// Written into each claim file after the pid: who holds it, for the next instance's refusal.
std::string claim_note(const Config& c) { return "state_dir=" + state_dir(c) + "\nconfig=" + c.path; }

// "pid 123, state directory /x, config /x.toml" from a claim file's text; what it holds.
std::string claim_holder(const std::string& path) {
  auto text = read_file(path, 4096);
  if (!text.ok() || text->empty()) return "pid unknown";  // caught between its open and its write
  std::istringstream in(*text);
  std::string pid, line, dir, config;
  std::getline(in, pid);
  while (std::getline(in, line)) {
    if (line.rfind("state_dir=", 0) == 0) dir = line.substr(10);
    if (line.rfind("config=", 0) == 0) config = line.substr(7);
  }
  if (dir.empty()) dir = state_dir_of(static_cast<pid_t>(std::strtol(pid.c_str(), nullptr, 10)));
  return "pid " + pid + (dir.empty() ? "" : ", state directory " + dir) + (config.empty() ? "" : ", config " + config);
}

// The nearest ancestor of `pid` (or `pid` itself) that is a fastrestartd other than this one; 0 when none.
pid_t fastrestartd_above(pid_t pid) {
  for (int depth = 0; pid > 1 && depth < 64; ++depth) {
    auto st = read_proc_stat(pid);
    if (!st) return 0;
    if (st->comm == "fastrestartd" && pid != ::getpid()) return pid;
    pid = st->ppid;
  }
  return 0;
}

// "pid 123 (cmdline)", the command line's control characters escaped.
std::string process_text(pid_t pid) {
  std::string cmd = read_cmdline(pid);
  std::string clean;
  for (char ch : cmd) clean += static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f ? '?' : ch;
  return "pid " + std::to_string(pid) + (clean.empty() ? "" : " (" + clean + ")");
}

// "another fastrestartd (pid 123, state directory /x)" for a running fastrestartd.
std::string instance_text(pid_t fastrestartd) {
  const std::string dir = state_dir_of(fastrestartd);
  return "another fastrestartd (pid " + std::to_string(fastrestartd) + (dir.empty() ? "" : ", state directory " + dir) + ")";
}

Result<LockFile> claim_control_socket(const Config& c, const std::string& socket, std::optional<gid_t> group) {
  FR_TRY(ensure_private_dir(std::filesystem::path(socket).parent_path().string(), group));
  const std::string path = socket + ".lock";
  auto lock = LockFile::acquire(path, claim_note(c));
  if (!lock.ok()) {
    if (lock.error().code != Errc::kBusy) return lock;
    return make_error(Errc::kBusy, "another fastrestartd (" + claim_holder(path) + ") already serves the control socket " +
                                       socket + " (it holds " + path + "); not starting a second one for " + c.path +
                                       ": its socket is left alone");
  }
  // A live listener that took no lock (a fastrestartd from before this claim, another program): the socket
  // is someone's, not a stale file to unlink.
  auto fd = connect_unix(socket, deadline_in(0));
  if (fd.ok()) {
    auto peer = peer_cred(fd->get());
    std::string who = "an unknown process";
    if (peer.ok() && peer->pid > 0) {
      const pid_t above = fastrestartd_above(peer->pid);
      who = above ? instance_text(above) : process_text(peer->pid);
    }
    return make_error(Errc::kBusy, "the control socket " + socket + " is live (" + who + " listens on it); not starting a second fastrestartd on it for " +
                                       c.path + ": it is left alone");
  }
  return lock;
}

Result<LockFile> claim_daemon_socket(const Config& c, const std::string& socket, std::optional<gid_t> group) {
  FR_TRY(ensure_private_dir(std::filesystem::path(socket).parent_path().string(), group));
  const std::string path = daemon_owner_path(socket);
  auto lock = LockFile::acquire(path, claim_note(c));
  if (lock.ok() || lock.error().code != Errc::kBusy) return lock;
  return make_error(Errc::kBusy, "another fastrestartd (" + claim_holder(path) + ") already runs the weight daemon on " + socket +
                                     " (the same GPU and socket directory; it holds " + path + "); not starting a second one for " +
                                     c.path + ": its daemons are left alone");
}

Status check_engine_port(const Config& c) {
  bool listening = false;
  const pid_t holder = port_listener(c.engine.port, &listening);
  if (!listening || holder <= 0) return {};
  // Only another instance's engine is refused: a leftover of this instance's own last run (its parent gone)
  // is the orphan sweep's, and a stranger on the port is the engine's own bind error to report.
  const pid_t above = fastrestartd_above(holder);
  if (!above) return {};
  return make_error(Errc::kBusy, instance_text(above) + " already runs an engine on port " + std::to_string(c.engine.port) +
                                     " (" + process_text(holder) + " listens on it); not starting a second one for " + c.path +
                                     " (engine.port): its engine is left alone");
}

}  // namespace

std::string daemon_owner_path(const std::string& daemon_socket) { return daemon_socket + ".owner"; }

std::string state_dir_of(pid_t pid) {
  if (pid <= 0) return "";
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return "";
  const std::string suffix = std::string("/") + kInstanceLockName;
  while (dirent* e = ::readdir(d.get())) {
    char target[4096];
    const std::string link = dir + "/" + e->d_name;
    const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    const std::string t(target, static_cast<size_t>(n));
    if (t.size() > suffix.size() && t.compare(t.size() - suffix.size(), suffix.size(), suffix) == 0)
      return t.substr(0, t.size() - suffix.size());
  }
  return "";
}

Result<InstanceClaims> claim_instance(const Config& c, const std::string& socket, std::optional<gid_t> group,
                                      const std::vector<std::string>& daemon_sockets) {
  InstanceClaims claims;
  FR_ASSIGN(claims.control, claim_control_socket(c, socket, group));
  for (const auto& s : daemon_sockets) {
    FR_ASSIGN(LockFile l, claim_daemon_socket(c, s, group));
    claims.daemons.push_back(std::move(l));
  }
  FR_TRY(check_engine_port(c));
  return claims;
}

}  // namespace fr::supervisor
