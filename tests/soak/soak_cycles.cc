// The soak's cycles: each injects one fault (docs/tinyengine.md "Faults", or an outside event) and says
// which exits it must cause. Soak::run settles, then checks the classification, the oracle and zombies.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/unix_socket.h"
#include "protocol/frame.h"
#include "soak/proc_scan.h"
#include "soak/soak.h"

namespace fr::soak {

using nlohmann::json;

namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Bytes to a Unix socket or a TCP port, then close; whatever happens to the connection is fine.
void send_unix(const std::string& path, const std::string& bytes) {
  auto fd = connect_unix(path, deadline_in(2));
  if (fd.ok()) (void)send_all(fd->get(), bytes.data(), bytes.size(), {}, deadline_in(2));
}

void send_tcp(uint16_t port, const std::string& bytes) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0)
    (void)send_all(fd.get(), bytes.data(), bytes.size(), {}, deadline_in(2));
}

}  // namespace

// With a standby parked, each of these releases it: the new engine is that process (Expect::released).
Expect Soak::kill9_engine() {
  const pid_t standby = parked_standby();
  ::kill(engine_pid(), SIGKILL);
  Expect e;
  e.required["crash"] = 1;
  e.released = standby;
  return e;
}

// An engine that exits 0 when nobody asked (vLLM's API server after its engine core died) is a failure.
Expect Soak::sigterm_engine() {
  const pid_t standby = parked_standby();
  ::kill(engine_pid(), SIGTERM);
  Expect e;
  e.required["unexpected_exit_0"] = 1;
  e.released = standby;
  return e;
}

// The next engine exits (with a random code) after K completions: the readiness probe is the first.
Expect Soak::exit_after_requests() {
  const int k = uniform(2, 4), code = std::array{0, 1, 3, 42}[static_cast<size_t>(uniform(0, 3))];
  queue_faults("--fault-exit-after-requests " + std::to_string(k) + " --fault-exit-code " + std::to_string(code));
  const pid_t old = engine_pid();
  Expect e = request_restart();
  settle(old, true, "exit_after_requests: the faulty engine");
  for (int i = 1; i < k; ++i) check_oracle("exit_after_requests: request " + std::to_string(i));
  e.required[code == 0 ? "unexpected_exit_0" : "crash"]++;
  return e;
}

Expect Soak::abort_after_requests() {
  const int k = uniform(2, 3);
  queue_faults("--fault-abort-after-requests " + std::to_string(k));
  const pid_t old = engine_pid();
  Expect e = request_restart();
  settle(old, true, "abort_after_requests: the faulty engine");
  for (int i = 1; i < k; ++i) check_oracle("abort_after_requests: request " + std::to_string(i));
  e.required["crash"]++;
  return e;
}

// A start that fails the way GPU engines fail, after a kill or a requested restart.
Expect Soak::startup_fault() {
  static const std::pair<const char*, const char*> kFaults[] = {
      {"--fault-cuda-oom", "cuda_oom"},
      {"--fault-vllm-free-memory", "memory_utilization"},
      {"--fault-exit-after-startup --fault-exit-code 5", "crash"},
  };
  const auto& [flags, cause] = kFaults[uniform(0, 2)];
  queue_faults(flags);
  Expect e;
  if (uniform(0, 1) == 0) {
    ::kill(engine_pid(), SIGKILL);
    e.required["crash"]++;
  } else {
    e = request_restart();
  }
  e.required[cause]++;
  return e;
}

Expect Soak::start_timeout() {
  queue_faults("--fault-startup-delay " + std::to_string(static_cast<int>(m_start_timeout_s) + 30));
  Expect e = request_restart();
  e.required["start_timeout"]++;
  return e;
}

// Stops answering after the readiness request: the health checks must find it hung.
Expect Soak::hang() {
  queue_faults("--fault-hang-after-requests 1");
  Expect e = request_restart();
  e.required["hung"]++;
  return e;
}

// A worker in the engine's process group outlives a SIGKILL of the engine (vLLM's EngineCore); the
// supervisor must kill the group before the next start.
Expect Soak::orphan_worker() {
  queue_faults("--fault-spawn-worker");
  const pid_t old = engine_pid();
  Expect e = request_restart();
  json s = settle(old, true, "orphan_worker: the engine with a worker");
  auto stats = json::parse(http_get(m_engine_port, "/stats").body, nullptr, false);
  const pid_t worker = stats.is_discarded() ? 0 : stats.value("worker_pid", 0);
  EXPECT_GT(worker, 0) << "no worker_pid in /stats";
  m_seen.insert(worker);
  const pid_t engine = engine_pid();
  ::kill(engine, SIGKILL);
  e.required["crash"]++;
  // The supervisor may not start the next engine before the worker is gone.
  settle(engine, true, "orphan_worker: the next engine");
  EXPECT_FALSE(running(worker)) << "the orphaned worker " << worker << " survived into the next engine's life";
  return e;
}

// SIGTERM is ignored for longer than stop_grace_s: the restart must SIGKILL, and still counts as requested.
Expect Soak::ignore_sigterm() {
  queue_faults("--fault-ignore-sigterm 5");
  const pid_t old = engine_pid();
  Expect e = request_restart();
  settle(old, true, "ignore_sigterm: the stubborn engine");
  return request_restart(e);
}

Expect Soak::restart() {
  Expect e;
  e.released = parked_standby();
  return request_restart(e);
}

// A reload pushed while a restart is under way: accepted (then applied) or refused as busy, never lost.
Expect Soak::reload_during_restart() {
  Expect e = request_restart();
  sleep_ms(uniform(0, 60));
  const std::string threads = std::to_string(uniform(2, 9));
  auto r = test::run({FR_FASTRESTARTCTL_BIN, "--socket", m_ctl, "reload", "--add-flags", "--threads " + threads});
  EXPECT_TRUE(r.exit_code == 0 || r.output.find("busy") != std::string::npos || r.output.find("unchanged") != std::string::npos)
      << r.output;
  e.allowed.insert("requested");
  if (r.exit_code == 0) {
    json s = m_sup->status();
    EXPECT_NE(s["flags"].dump().find("\"--threads\",\"" + threads + "\""), std::string::npos) << s["flags"].dump();
  }
  return e;
}

// The daemon dies while the next engine connects or attaches: the engine falls back to disk (or keeps
// the mapping it got), the supervisor respawns the daemon, and the answers stay right.
Expect Soak::kill9_daemon_during_attach() {
  const pid_t daemon = daemon_pid();
  Expect e = request_restart();
  sleep_ms(uniform(0, 40));
  ::kill(daemon, SIGKILL);
  EXPECT_TRUE(m_sup->wait_for([&](const json& j) {
    return !j["daemons"].empty() && j["daemons"][0].value("pid", -1) != daemon && j["daemons"][0].value("state", "") == "ready";
  }, 30)) << "the daemon was not respawned";
  return e;
}

// fastrestartd itself is SIGKILLed and started again: its engine and daemons must not outlive it (or
// block the new ones), and the new one must serve the right weights.
// With a standby, it must die with its supervisor too (parent-death signal, end of file on its gate);
// half the time it has a worker in its group, which only the next fastrestartd's sweep of the recorded
// group (standby.pgid) can reach.
Expect Soak::kill9_supervisor() {
  pid_t standby = 0, worker = 0;
  if (m_p.standby && uniform(0, 1) == 0) {
    queue_standby_faults("--fault-spawn-worker");
    standby = replace_standby("kill9_supervisor: a standby with a worker");
    for (int i = 0; i < 200 && standby > 0 && worker == 0; ++i) {
      for (const auto& c : children_of(standby))
        if (c.state != 'Z') worker = c.pid;
      if (worker == 0) sleep_ms(10);
    }
    EXPECT_GT(worker, 0) << "the standby " << standby << " has no worker";
    std::printf("soak:   standby %d has worker %d\n", standby, worker);
    m_seen.insert(worker);
  } else if (m_p.standby) {
    standby = parked_standby();
  }
  const pid_t engine = engine_pid(), daemon = daemon_pid();
  EXPECT_EQ(m_sup->stop(SIGKILL), 128 + SIGKILL);
  for (int i = 0; i < 500 && (running(engine) || running(daemon) || (standby > 0 && running(standby))); ++i) {
    reap_children(-1);
    sleep_ms(10);
  }
  EXPECT_FALSE(running(engine)) << "the engine outlived its supervisor";
  EXPECT_FALSE(running(daemon)) << "the weight daemon outlived its supervisor";
  if (standby > 0) {
    EXPECT_FALSE(running(standby)) << "the standby outlived its supervisor";
  }
  reap_children(-1);
  m_sup->start();
  m_seen.insert(m_sup->pid());
  if (worker > 0) {
    // The sweep comes before the new fastrestartd starts anything.
    EXPECT_TRUE(m_sup->wait_for([](const json& j) { return j.value("state", "") == "ready"; }, 60));
    for (int i = 0; i < 100 && running(worker); ++i) {
      reap_children(m_sup->pid());
      sleep_ms(10);
    }
    EXPECT_FALSE(running(worker)) << "the standby's worker " << worker << " survived the next fastrestartd's start";
    EXPECT_NE(m_sup->log().find("killed process group " + std::to_string(standby) + " (standby.pgid)"), std::string::npos)
        << "no sweep of the standby's group " << standby << " in the log";
  }
  Expect e;
  e.new_supervisor = true;
  return e;
}

// A client that goes away mid-request: half a frame, or a whole reload whose reply it never reads.
Expect Soak::control_disconnect() {
  Expect e;
  if (uniform(0, 1) == 0) {
    send_unix(m_ctl, std::string("\0\0\4\0{\"op\":\"rel", 13));
    e.new_engine = false;
    return e;
  }
  auto fd = connect_unix(m_ctl, deadline_in(2));
  EXPECT_TRUE(fd.ok());
  if (fd.ok()) {
    // A value the engine does not already run with: an unchanged push restarts nothing (seed
    // 135121781663761 drew the same value twice). reload_during_restart pushes 2..9, so only the last
    // value pushed here can be the current one.
    int threads = static_cast<int>(uniform(10, 20));
    if (threads == m_disconnect_threads) threads = threads == 20 ? 10 : threads + 1;
    m_disconnect_threads = threads;
    json req{{"op", "reload"}, {"flags", {"--threads", std::to_string(threads)}}, {"mode", "add"}, {"wait", true}};
    EXPECT_TRUE(proto::write_frame(fd->get(), req, -1, deadline_in(2)).ok());
  }
  fd = Error{};  // close without reading the reply
  e.required["requested"]++;
  return e;
}

// Random bytes into every socket: the daemon's, the control socket, fastrestartd's HTTP and the engine's.
// Nothing may exit, and each must answer properly afterwards.
Expect Soak::garbage_to_every_socket() {
  auto garbage = [&] {
    std::string b(static_cast<size_t>(uniform(1, 4096)), '\0');
    for (auto& ch : b) ch = static_cast<char>(uniform(0, 255));
    if (uniform(0, 3) == 0) b.replace(0, std::min<size_t>(b.size(), 4), "\x7f\xff\xff\xff", 4);  // a huge length
    return b;
  };
  send_unix(m_run + "/weightd-host.sock", garbage());
  send_unix(m_ctl, garbage());
  send_tcp(m_http_port, garbage());
  send_tcp(m_engine_port, garbage());
  send_tcp(m_http_port, "GET /" + std::string(static_cast<size_t>(uniform(1, 20000)), 'a') + " HTTP/1.1\r\n\r\n");
  EXPECT_EQ(http_get(m_http_port, "/health").status, 200);
  EXPECT_EQ(http_get(m_http_port, "/metrics").status, 200);
  auto st = test::run({test::weightctl(), "--socket-dir", m_run, "status"});
  EXPECT_EQ(st.exit_code, 0) << st.output;
  Expect e;
  e.new_engine = false;
  return e;
}

// Stalled half-requests to fastrestartd's HTTP port from the prober's own address, more than the health
// server's connection limit (256, docs/health.md): the probes must answer within a kubelet's timeout while
// every one of them stays open, and the connections are closed afterwards (the descriptor check).
Expect Soak::stalled_half_requests() {
  const std::string half = "GET /health HTTP/1.1\r\nHost: x\r\n";
  std::vector<UniqueFd> stalled;
  const int n = 256 + uniform(1, 100);
  for (int i = 0; i < n; ++i) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(m_http_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) continue;  // a full backlog: fine
    (void)send_all(fd.get(), half.data(), static_cast<size_t>(uniform(1, static_cast<int>(half.size()))), {}, deadline_in(2));
    stalled.push_back(std::move(fd));
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(http_get(m_http_port, "/health", 3).status, 200) << "with " << stalled.size() << " stalled connections";
    EXPECT_EQ(http_get(m_http_port, "/ready", 3).status, 200) << "with " << stalled.size() << " stalled connections";
  }
  Expect e;
  e.new_engine = false;
  return e;
}

// Well-framed requests of the wrong shape get an error reply naming the field; the supervisor carries on.
Expect Soak::malformed_control_requests() {
  for (const json& req : {json{{"op", 5}}, json{{"op", "reload"}, {"wait", "yes"}}, json{{"op", "reload"}, {"flags", {1}}},
                          json{{"op", "reload"}, {"mode", nullptr}}, json::array(), json{{"nothing", true}}}) {
    auto r = m_sup->request(req, 10);
    EXPECT_TRUE(r.ok()) << req.dump() << ": " << (r.ok() ? "" : r.error().message);
    if (r.ok()) {
      EXPECT_FALSE(r->value("ok", true)) << req.dump() << " -> " << r->dump();
      EXPECT_TRUE(r->contains("error")) << r->dump();
    }
  }
  Expect e;
  e.new_engine = false;
  return e;
}

// The checkpoint's files are replaced (a copy renamed over each: new identities, the same bytes) while a
// cold start reads them. A publish may only store what is on disk under the identities taken before the
// read (docs/protocol.md, "publish"): it is refused, or it went in before the change and its key is then
// simply stale. Either way the engine and every later one answer as a disk load does.
Expect Soak::replace_checkpoint_during_cold_start() {
  auto ev = test::run({test::weightctl(), "--socket-dir", m_run, "evict", "--all"});  // nothing to attach
  EXPECT_EQ(ev.exit_code, 0) << ev.output;
  const pid_t old = engine_pid();
  Expect e = request_restart();
  sleep_ms(uniform(0, 80));  // somewhere in the stop, the attach, the disk read or the publish
  for (const auto& f : std::filesystem::directory_iterator(m_checkpoint))
    if (f.path().extension() == ".safetensors") test::replace_by_rename(f.path().string());
  settle(old, true, "replace_checkpoint_during_cold_start: the cold start");
  check_oracle("replace_checkpoint_during_cold_start: the cold start");
  // The next start attaches what was published (or misses and loads): the disk's answer again.
  const pid_t cold = engine_pid();
  e = request_restart(e);
  settle(cold, true, "replace_checkpoint_during_cold_start: the start after it");
  check_oracle("replace_checkpoint_during_cold_start: the start after it");
  // Keep only the entry the engine runs on (an early publish left one under the old identities), so the
  // daemon holds what it held before the cycle.
  auto stats = json::parse(http_get(m_engine_port, "/stats").body, nullptr, false);
  const std::string keep = stats.is_discarded() ? "" : stats["load"].value("fingerprint", "");
  auto st = test::run({test::weightctl(), "--socket-dir", m_run, "status", "--json"});
  EXPECT_EQ(st.exit_code, 0) << st.output;
  auto j = json::parse(st.output, nullptr, false);
  if (!j.is_discarded() && !keep.empty())
    for (const auto& entry : j.value("entries", json::array()))
      if (entry.value("fingerprint", "") != keep)
        (void)test::run({test::weightctl(), "--socket-dir", m_run, "evict", entry.value("fingerprint", "")});
  return e;
}

}  // namespace fr::soak
