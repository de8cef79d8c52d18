// SnapshotAgent: the engine's side of the prepare/resume exchange (docs/snapshot.md, "The prepare/resume
// exchange"). One request line of JSON per connection, one reply line.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "common/unix_socket.h"
#include "common/bounded_json.h"
#include "fastrestart/engine_loader.h"
#include "protocol/messages.h"

namespace fastrestart {
namespace {

using fr::proto::json;

constexpr size_t kMaxRequest = 4096;
constexpr double kIoTimeoutS = 10;
// How long a prepared engine waits for its resume before it resumes by itself (docs/snapshot.md).
constexpr int64_t kResumeWatchdogS = 600;

json to_json(const MappingInfo& i) {
  json key = fr::parse_json_or_discarded(i.key_json, fr::kFrameJsonLimits);
  return {{"fingerprint", i.fingerprint}, {"digest", i.digest}, {"device", i.device}, {"daemon_socket", i.daemon_socket},
          {"key", key.is_discarded() ? json(nullptr) : key}, {"base", i.base}, {"bytes", i.bytes},
          {"mapped", i.mapped}, {"seconds", i.seconds}};
}

// A KV arena as the exchange reports it (docs/snapshot.md, "Snapshots without the KV cache").
json arena_json(const Arena& a, double seconds) {
  json j{{"name", a.options().name}, {"device", a.options().device}, {"daemon_socket", a.daemon_socket()},
         {"base", reinterpret_cast<uintptr_t>(a.base())}, {"bytes", a.bytes()}, {"mapped", a.leased()},
         {"seconds", seconds}};
  if (auto l = a.last_lease(); l && a.leased())
    j.update({{"created", l->created}, {"waited_s", l->waited_s}, {"previous_holder_pid", l->previous_holder_pid},
              {"generation", l->generation}});
  return j;
}

double agent_seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

class Agent final : public SnapshotAgent {
 public:
  Agent(std::vector<std::shared_ptr<Weights>> w, std::vector<std::shared_ptr<Arena>> arenas, SnapshotHooks h,
        std::string path, fr::UniqueFd listener, fr::UniqueFd stop_r, fr::UniqueFd stop_w)
      : m_weights(std::move(w)), m_arenas(std::move(arenas)), m_hooks(std::move(h)), m_path(std::move(path)),
        m_listener(std::move(listener)), m_stop_r(std::move(stop_r)), m_stop_w(std::move(stop_w)) {
    m_thread = std::thread([this] { loop(); });
  }
  ~Agent() override {
    const char b = 1;
    (void)!::write(m_stop_w.get(), &b, 1);
    if (m_thread.joinable()) m_thread.join();
    ::unlink(m_path.c_str());
  }
  std::string socket_path() const override { return m_path; }
  bool prepared() const override { return m_prepared.load(); }

 private:
  void loop() {
    for (;;) {
      pollfd p[2] = {{m_listener.get(), POLLIN, 0}, {m_stop_r.get(), POLLIN, 0}};
      // A helper that died between prepare and resume would leave the engine without its weights for good:
      // past the watchdog the agent resumes by itself (a later resume then finds nothing to do).
      int timeout_ms = -1;
      if (m_prepared) {
        const auto left = m_prepared_at + std::chrono::seconds(kResumeWatchdogS) - std::chrono::steady_clock::now();
        timeout_ms = static_cast<int>(std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(left).count()));
      }
      const int n = ::poll(p, 2, timeout_ms);
      if (n < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (n == 0) {
        // A failed re-attach (no daemon yet) is tried again every few seconds, never in a tight loop.
        if (!resume().value("ok", false))
          m_prepared_at = std::chrono::steady_clock::now() - std::chrono::seconds(kResumeWatchdogS - 5);
        continue;
      }
      if (p[1].revents) return;
      if (!(p[0].revents & POLLIN)) continue;
      fr::UniqueFd c(::accept4(m_listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) continue;
      serve(c.get());
    }
  }

  void serve(int c) {
    std::string line;
    const auto deadline = fr::deadline_in(kIoTimeoutS);
    while (line.size() < kMaxRequest && (line.empty() || line.back() != '\n')) {
      char ch;
      if (!fr::recv_exact(c, &ch, 1, nullptr, deadline).ok()) return;
      line += ch;
    }
    json req = fr::parse_json_or_discarded(line, fr::kSmallJsonLimits);
    json reply;
    if (!req.is_object() || !req.contains("op") || !req["op"].is_string()) {
      reply = {{"ok", false}, {"error", "expected one line {\"op\":\"prepare\"|\"resume\"|\"hello\"}"}};
    } else {
      const std::string op = req["op"];
      if (op == "prepare") reply = prepare();
      else if (op == "resume") reply = resume();
      else if (op == "hello") reply = {{"ok", true}, {"agent", "engine_loader " FASTRESTART_VERSION}, {"prepared", m_prepared.load()},
                                       {"weights", m_weights.size()}, {"arenas", m_arenas.size()}, {"pid", ::getpid()}};
      else reply = {{"ok", false}, {"error", "unknown op \"" + op + "\""}};
    }
    const std::string out = reply.dump() + "\n";
    (void)fr::send_all(c, out.data(), out.size(), {}, fr::deadline_in(kIoTimeoutS));
  }

  // The weights, then the arenas; an error puts back what was released (in reverse) and resumes.
  json prepare() {
    std::lock_guard lk(m_mutex);
    if (m_prepared) return {{"ok", true}, {"weights", m_released}, {"arenas", m_released_arenas}, {"already", true}};
    if (m_hooks.quiesce)
      if (auto s = m_hooks.quiesce(); !s.ok()) return {{"ok", false}, {"error", "quiesce: " + s.error().message}};
    json released = json::array(), arenas = json::array();
    std::vector<std::shared_ptr<Weights>> done;
    std::vector<std::shared_ptr<Arena>> unmapped;
    auto undo = [&](const std::string& why) -> json {
      for (auto a = unmapped.rbegin(); a != unmapped.rend(); ++a) (void)(*a)->swap_in();
      for (auto d = done.rbegin(); d != done.rend(); ++d) (void)(*d)->reattach();
      if (m_hooks.resume) (void)m_hooks.resume();
      return {{"ok", false}, {"error", why}};
    };
    for (const auto& w : m_weights) {
      if (w->mode() != Mode::kZeroCopy) continue;
      auto r = w->release_mapping();
      if (!r.ok()) return undo("release: " + r.error().message);
      done.push_back(w);
      released.push_back(to_json(*r));
    }
    for (const auto& a : m_arenas) {
      const auto t = std::chrono::steady_clock::now();
      if (auto s = a->unmap(); !s.ok()) return undo("unmap: " + s.error().message);
      unmapped.push_back(a);
      arenas.push_back(arena_json(*a, agent_seconds_since(t)));
    }
    m_released = released;
    m_released_arenas = arenas;
    m_prepared = true;
    m_prepared_at = std::chrono::steady_clock::now();
    return {{"ok", true}, {"weights", released}, {"arenas", arenas}};
  }

  // The weights, then the arenas (a lease waits for the holder before this process, the one dumped, to
  // have exited), then the resume hook: the engine serves again only with all of them mapped.
  json resume() {
    std::lock_guard lk(m_mutex);
    if (!m_prepared) return {{"ok", true}, {"weights", json::array()}, {"arenas", json::array()}, {"already", true}};
    json mapped = json::array(), arenas = json::array();
    for (const auto& w : m_weights) {
      if (w->mode() != Mode::kZeroCopy) continue;
      auto r = w->reattach();
      if (!r.ok()) return {{"ok", false}, {"error", "re-attach: " + r.error().message}};
      mapped.push_back(to_json(*r));
    }
    for (const auto& a : m_arenas) {
      if (a->leased()) {  // a resume tried before, which failed later
        arenas.push_back(arena_json(*a, 0));
        continue;
      }
      auto l = a->swap_in();
      if (!l.ok()) return {{"ok", false}, {"error", "lease: " + l.error().message}};
      arenas.push_back(arena_json(*a, l->seconds));
    }
    if (m_hooks.resume)
      if (auto s = m_hooks.resume(); !s.ok()) return {{"ok", false}, {"error", "resume: " + s.error().message}};
    m_prepared = false;
    m_released = json::array();
    m_released_arenas = json::array();
    return {{"ok", true}, {"weights", mapped}, {"arenas", arenas}};
  }

  std::vector<std::shared_ptr<Weights>> m_weights;
  std::vector<std::shared_ptr<Arena>> m_arenas;
  SnapshotHooks m_hooks;
  std::string m_path;
  fr::UniqueFd m_listener, m_stop_r, m_stop_w;
  std::mutex m_mutex;
  std::atomic<bool> m_prepared{false};
  std::chrono::steady_clock::time_point m_prepared_at;
  json m_released = json::array();
  json m_released_arenas = json::array();
  std::thread m_thread;
};

}  // namespace

Result<std::unique_ptr<SnapshotAgent>> SnapshotAgent::start(std::vector<std::shared_ptr<Weights>> weights,
                                                            SnapshotHooks hooks, const std::string& socket_path,
                                                            std::vector<std::shared_ptr<Arena>> arenas) {
  std::string path = socket_path;
  if (path.empty()) {
    const char* env = std::getenv(kSnapshotSocketEnv);
    if (!env || !*env) return std::unique_ptr<SnapshotAgent>();
    path = env;
  }
  for (const auto& w : weights)
    if (!w) return Error{Errc::kInvalidArgument, "SnapshotAgent: a null Weights"};
  for (const auto& a : arenas)
    if (!a) return Error{Errc::kInvalidArgument, "SnapshotAgent: a null Arena"};
  // A socket left by the engine this one replaces (it died without removing it); never anything else.
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return Error{Errc::kInvalidArgument, "snapshot exchange: " + path + " exists and is not a socket"};
    ::unlink(path.c_str());
  }
  auto l = fr::listen_unix(path, 0600);
  if (!l.ok()) return l.error().context("snapshot exchange socket " + path);
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return fr::sys_error("pipe2");
  fr::UniqueFd r(p[0]), w(p[1]);
  return std::unique_ptr<SnapshotAgent>(
      new Agent(std::move(weights), std::move(arenas), std::move(hooks), path, std::move(*l), std::move(r), std::move(w)));
}

}  // namespace fastrestart
