#include "supervisor/front/front_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/io.h"
#include "supervisor/child.h"
#include "supervisor/group_stop.h"
#include "supervisor/listen_socket.h"

namespace fr::supervisor {
namespace {

constexpr double kFrontBackoffFirstS = 0.1;
constexpr double kFrontBackoffMaxS = 5;
constexpr double kFrontStableRunS = 30;  // a front that ran this long starts the backoff over
constexpr double kFrontKillAfterGraceS = 5;
constexpr size_t kFrontStatusMaxBytes = 1 << 20;

std::string front_exit_text(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "signal " + std::to_string(WTERMSIG(status)) + " (" + ::strsignal(WTERMSIG(status)) + ")";
  return "status " + std::to_string(status);
}

void add_counts(std::map<std::string, uint64_t>& into, const std::map<std::string, uint64_t>& more) {
  for (const auto& [k, n] : more) into[k] += n;
}

uint64_t sum_counts(const std::map<std::string, uint64_t>& m) {
  uint64_t n = 0;
  for (const auto& [k, v] : m) n += v;
  return n;
}

}  // namespace

std::string front_binary(const Config& c) {
  return c.front.path.empty() ? find_companion("fastrestart-front", "front") : c.front.path;
}

std::vector<std::string> front_argv(const Config& c, const std::string& status_file) {
  auto num = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return std::string(b);
  };
  return {front_binary(c),
          "--upstream", "127.0.0.1:" + std::to_string(c.front.bound_upstream_port),
          "--hold-s", num(c.front.hold_s),
          "--max-held-requests", std::to_string(c.front.max_held_requests),
          "--max-body-bytes", std::to_string(c.front.max_body_bytes),
          "--max-response-bytes", std::to_string(c.front.max_response_bytes),
          "--stop-grace-s", num(c.front.stop_grace_s),
          "--max-idle-connections", std::to_string(c.front.max_idle_connections),
          "--status-file", status_file};
}

bool read_front_counters(const std::string& text, status::FrontRequestsStatus& into, int64_t* pid, uint64_t* connections) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("requests") || !j["requests"].is_object()) return false;
  // The front's own file, with the names of its stats.cc: read leniently (a field it lacks stays 0).
  auto count = [](const nlohmann::json& o, const char* k) -> uint64_t {
    auto it = o.find(k);
    return it != o.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
  };
  auto table = [](const nlohmann::json& o, const char* k) {
    std::map<std::string, uint64_t> m;
    auto it = o.find(k);
    if (it == o.end() || !it->is_object()) return m;
    for (const auto& [name, v] : it->items())
      if (v.is_number_unsigned()) m[name] = v.get<uint64_t>();
    return m;
  };
  const auto& r = j["requests"];
  into.received = count(r, "received");
  into.answered = count(r, "answered");
  into.held = count(r, "held");
  into.held_now = count(r, "held_now");
  into.resent = count(r, "resent");
  into.continued = count(r, "continued");
  into.rejected = table(r, "rejected");
  into.failed = table(r, "failed");
  if (pid) *pid = j.value("pid", int64_t{0});
  if (connections) *connections = count(j, "connections");
  return true;
}

FrontProcess::FrontProcess(Loop& loop, const Config& cfg, int listen_fd, std::string status_file)
    : m_loop(loop), m_cfg(cfg), m_listen_fd(listen_fd), m_status_file(std::move(status_file)),
      m_respawn_timer(loop), m_kill_timer(loop) {}

FrontProcess::~FrontProcess() { kill_now(); }

void FrontProcess::start() {
  m_stopping = false;
  ::unlink(m_status_file.c_str());  // a file a previous fastrestartd's front left says nothing of this one
  spawn();
}

void FrontProcess::spawn() {
  if (m_stopping || m_running) return;
  SpawnSpec spec;
  spec.argv = front_argv(m_cfg, m_status_file);
  spec.listen_fd = m_listen_fd;
  spec.listen_fd_name = kListenFdName;
  if (auto s = spawn_supervised(m_loop, spec, "front", nullptr, m_child); !s.ok()) {
    m_last_exit = "not started: " + s.error().message;
    m_backoff_s = m_backoff_s == 0 ? kFrontBackoffFirstS : std::min(m_backoff_s * 2, kFrontBackoffMaxS);
    spdlog::error("front: {}; trying again in {} s", s.error().message, m_backoff_s);
    m_respawn_timer.start(m_backoff_s, [this] { spawn(); });
    return;
  }
  m_running = true;
  m_spawned_at = m_loop.now_s();
  spdlog::info("started fastrestart-front (pid {}) on the engine's port, forwarding to 127.0.0.1:{}", m_child.pid,
               m_cfg.front.bound_upstream_port);
}

void FrontProcess::collect(bool died) {
  auto text = read_file(m_status_file, kFrontStatusMaxBytes);
  ::unlink(m_status_file.c_str());
  status::FrontRequestsStatus last;
  int64_t pid = 0;
  if (!text.ok() || !read_front_counters(*text, last, &pid, nullptr) || pid != m_child.pid) return;
  m_past.received += last.received;
  m_past.answered += last.answered;
  m_past.held += last.held;
  m_past.resent += last.resent;
  m_past.continued += last.continued;
  add_counts(m_past.rejected, last.rejected);
  add_counts(m_past.failed, last.failed);
  if (died) {
    const uint64_t done = last.answered + sum_counts(last.rejected) + sum_counts(last.failed);
    m_past.lost += last.received > done ? last.received - done : 0;
  }
}

bool FrontProcess::on_exit(pid_t pid, int status) {
  if (!m_running || pid != m_child.pid) return false;
  m_running = false;
  if (m_child.reader) m_child.reader->drain();
  m_child.reader.reset();
  m_last_exit = front_exit_text(status);
  const bool asked = m_stopping;
  const bool clean = asked && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  const uint64_t lost_before = m_past.lost;
  collect(!clean);
  const uint64_t lost = m_past.lost - lost_before;
  if (asked) {
    spdlog::info("fastrestart-front pid {} stopped ({})", pid, m_last_exit);
    m_kill_timer.stop();
    if (auto done = std::move(m_on_stopped)) {
      m_on_stopped = nullptr;
      done();
    }
    return true;
  }
  ++m_restarts;
  if (m_loop.now_s() - m_spawned_at >= kFrontStableRunS) m_backoff_s = 0;
  m_backoff_s = m_backoff_s == 0 ? kFrontBackoffFirstS : std::min(m_backoff_s * 2, kFrontBackoffMaxS);
  spdlog::error("fastrestart-front pid {} exited: {}; {} request(s) in it lost (its last status file), restart {} in {} s "
                "(new connections wait on the engine's port meanwhile)",
                pid, m_last_exit, lost, m_restarts, m_backoff_s);
  m_respawn_timer.start(m_backoff_s, [this] { spawn(); });
  return true;
}

void FrontProcess::stop(std::function<void()> done) {
  m_stopping = true;
  m_respawn_timer.stop();
  if (!m_running) {
    if (done) m_loop.post(std::move(done));
    return;
  }
  m_on_stopped = std::move(done);
  // The front stops taking requests at the SIGTERM and lets those in flight finish for its own grace.
  stop_group(m_kill_timer, {.pgid = m_child.pid, .pidfd = m_child.pidfd.get(),
                            .grace_s = m_cfg.front.stop_grace_s + kFrontKillAfterGraceS,
                            .what = "fastrestart-front's process group", .term_to = TermTo::kLeader});
}

void FrontProcess::kill_now() {
  m_stopping = true;
  m_respawn_timer.stop();
  m_kill_timer.stop();
  m_on_stopped = nullptr;
  if (!m_running) return;
  signal_group(m_child.pid, m_child.pidfd.get(), SIGKILL);
  int st = 0;
  while (::waitpid(m_child.pid, &st, 0) < 0 && errno == EINTR) {
  }
  m_running = false;
  m_child.reader.reset();
  collect(true);
}

void FrontProcess::stop_blocking() {
  m_stopping = true;
  m_respawn_timer.stop();
  if (m_running) {
    spdlog::info("stopping fastrestart-front pid {} (fastrestartd exits)", m_child.pid);
    ::kill(m_child.pid, SIGTERM);
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration<double>(m_cfg.front.stop_grace_s + kFrontKillAfterGraceS);
    int st = 0;
    while (std::chrono::steady_clock::now() < until) {
      if (::waitpid(m_child.pid, &st, WNOHANG) == m_child.pid) {
        m_running = false;
        m_child.reader.reset();
        m_last_exit = front_exit_text(st);
        collect(!(WIFEXITED(st) && WEXITSTATUS(st) == 0));
        spdlog::info("fastrestart-front pid {} stopped ({})", m_child.pid, m_last_exit);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  kill_now();
}

status::FrontStatus FrontProcess::status() const {
  status::FrontStatus s;
  s.state = m_running ? (m_stopping ? "stopping" : "running") : (m_stopping ? "stopped" : "backoff");
  s.pid = m_running ? m_child.pid : 0;
  s.upstream = "127.0.0.1:" + std::to_string(m_cfg.front.bound_upstream_port);
  s.restarts = m_restarts;
  s.last_exit = m_last_exit;
  s.requests = m_past;
  s.requests.held_now = 0;
  if (!m_running) return s;
  auto text = read_file(m_status_file, kFrontStatusMaxBytes);
  status::FrontRequestsStatus now;
  int64_t pid = 0;
  uint64_t connections = 0;
  if (!text.ok() || !read_front_counters(*text, now, &pid, &connections) || pid != m_child.pid) return s;
  auto& r = s.requests;
  r.received += now.received;
  r.answered += now.answered;
  r.held += now.held;
  r.held_now = now.held_now;
  r.resent += now.resent;
  r.continued += now.continued;
  add_counts(r.rejected, now.rejected);
  add_counts(r.failed, now.failed);
  s.connections = connections;
  return s;
}

}  // namespace fr::supervisor
