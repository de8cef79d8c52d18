#include "supervisor/engine_end.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "supervisor/child.h"
#include "supervisor/gpu_leftover.h"
#include "supervisor/group_stop.h"
#include "supervisor/memory_share.h"

namespace fr::supervisor {

namespace {
// How often the drain looks again while the group lives or orphans are swept, and while GPU memory settles.
constexpr double kGroupPollS = 0.02;
constexpr double kMemoryPollS = 0.1;
}  // namespace

EngineEnd::EngineEnd(Loop& loop, const Config& cfg, GpuProbe& gpus, EngineEndHost& host)
    : m_loop(loop), m_cfg(cfg), m_gpus(gpus), m_host(host), m_kill_timer(loop), m_drain_timer(loop) {}

void EngineEnd::note_engine_spawn() {
  if (m_cfg.weights.backend == "host") return;
  for (const auto& [gpu, used] : gpus_used_now(m_gpus, m_cfg.gpus))
    m_baseline_used[gpu] = used - static_cast<double>(m_host.daemon_gpu_bytes(gpu));
}

void EngineEnd::terminate(pid_t pgid, int pidfd, bool kill_now) {
  if (kill_now) {
    spdlog::warn("killing the engine's process group {}", pgid);
    signal_group(pgid, pidfd, SIGKILL);
    return;
  }
  stop_group(m_kill_timer, {.pgid = pgid, .pidfd = pidfd, .grace_s = m_cfg.engine.stop_grace_s,
                            .what = "the engine's process group"});
}

void EngineEnd::drain(pid_t pgid, std::function<void()> done) {
  m_pgid = pgid;
  m_drain_start = m_loop.now_s();
  m_done = std::move(done);
  m_drain_timer.start(0.0, [this] { drain_step(); });
}

void EngineEnd::drain_step() {
  const double waited = m_loop.now_s() - m_drain_start;
  if (group_alive(m_pgid)) {
    if (waited > m_cfg.engine.stop_grace_s) {
      spdlog::warn("engine group {} outlived its leader by {} s: SIGKILL", m_pgid, m_cfg.engine.stop_grace_s);
      signal_group(m_pgid, -1, SIGKILL);
    }
    m_drain_timer.start(kGroupPollS, [this] { drain_step(); });
    return;
  }
  m_kill_timer.stop();  // the group is gone and its id may be reused: terminate's SIGKILL must not outlive it
  if (m_leftovers.sweep(::getpid(), m_host.known_children(), m_host.stopping() ? "at stop" : "before the next start") > 0) {
    m_drain_timer.start(kGroupPollS, [this] { drain_step(); });
    return;
  }
  if (!m_host.release_follows() && m_cfg.weights.backend != "host") {
    // The daemons' arenas stay after the engine's exit, waiting for the next lease: not a leak.
    auto expected = [this](const std::string& gpu) {
      auto base = m_baseline_used.find(gpu);
      return (base != m_baseline_used.end() ? base->second : 0.0) + static_cast<double>(m_host.daemon_gpu_bytes(gpu)) +
             static_cast<double>(m_host.standby_gpu_bytes(gpu));
    };
    const auto left = gpu_leftovers(m_gpus, m_cfg.gpus, expected, m_cfg.memory.leak_tolerance_mib * 1048576.0);
    if (!left.empty() && waited < m_cfg.memory.settle_timeout_s) {
      m_drain_timer.start(kMemoryPollS, [this] { drain_step(); });
      return;
    }
    for (const auto& l : left)
      spdlog::warn("GPU {}: {} still used after the engine exited, beyond the daemons' {} and what was used "
                   "before it started (a leak: orphaned workers?)",
                   l.gpu, gb_text(l.bytes), gb_text(static_cast<double>(m_host.daemon_gpu_bytes(l.gpu))));
  }
  m_kill_timer.stop();
  // Moved out first: `done` may start the next engine, and with it another drain later.
  auto done = std::move(m_done);
  m_done = nullptr;
  if (done) done();
}

void EngineEnd::stop() {
  m_kill_timer.stop();
  m_drain_timer.stop();
  m_done = nullptr;
}

}  // namespace fr::supervisor
