// The control side of the Supervisor: status, reload, restart, stop-engine, start-engine, daemons
// (docs/supervisor.md, "Control protocol"). What a reload decides is the Reload's (reload/reload.h).
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "common/atomic_file.h"
#include "common/control_chars.h"
#include "common/fd.h"
#include "common/io.h"
#include "common/secrets.h"
#include "supervisor/config_reread.h"
#include "supervisor/control_request.h"
#include "supervisor/engine_rows.h"
#include "supervisor/flags.h"
#include "supervisor/kv_stats.h"
#include "supervisor/state_files.h"
#include "supervisor/redaction.h"
#include "supervisor/supervisor.h"
#include "status/status.h"
#include "supervisor/engines/check.h"

namespace fr::supervisor {

using nlohmann::json;

namespace {

json error(const std::string& code, const std::string& msg) {
  return {{"ok", false}, {"error", {{"code", code}, {"message", msg}}}};
}

double monotonic_usec() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

}  // namespace

json Supervisor::request(const json& req) {
  auto p = std::make_shared<std::promise<json>>();
  auto fut = p->get_future();
  m_loop.post([this, req, p] {
    json r = handle(req, p);
    if (!r.is_null()) p->set_value(std::move(r));
  });
  // A reload can take as long as an engine start; but never wait on a loop that has ended.
  while (fut.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready)
    if (!m_running) return error("cancelled", "the supervisor is shutting down");
  // Every reply leaves with the known secrets scrubbed: the control socket, /status and /metrics (built
  // from the status reply) all come through here.
  json r = fut.get();
  process_scrubber().scrub(r);
  return r;
}

// Returns the reply, or null when it will come later through `reply` (reload --wait).
json Supervisor::handle(const json& req, std::shared_ptr<std::promise<json>> reply) {
  register_pushed_secrets(req, m_cfg.engine.secret_flags);
  auto parsed = parse_control_request(req);
  if (!parsed.ok()) return error("invalid_argument", parsed.error().message);
  const std::string op = parsed->op;
  if (op == "status") return {{"ok", true}, {"status", status_json()}};
  if (op == "daemons") return {{"ok", true}, {"daemons", status_json()["daemons"]}};
  if (op == "check") return handle_check(*parsed);
  if (op == "snapshot") return m_snapshots->handle(req, reply);
  if (op == "reload") {
    if (json busy = reload_refusal(); !busy.is_null()) return busy;
    std::shared_ptr<std::promise<json>> waiter = parsed->wait ? reply : nullptr;
    if (!parsed->flags) return reread_config(waiter);  // systemctl reload: fastrestartctl reload without flags
    return start_reload(pushed_flags(*parsed, m_reload.flags()), waiter);
  }
  if (op == "restart" || op == "start-engine" || op == "stop-engine") {
    if (m_snapshots->creating()) return error("busy", "a snapshot is being created; try again when it is done");
    if (is_terminal(m_state)) return error("busy", std::string("the supervisor is ") + state_name(m_state));
    if (op == "stop-engine") {
      raise(Event::kHoldRequested);
      return {{"ok", true}, {"message", "stopping the engine; it stays stopped until start-engine"}};
    }
    raise(Event::kRestartRequested);
    return {{"ok", true}, {"message", op == "restart" ? "restarting the engine" : "starting the engine"}};
  }
  return error("protocol", "unknown op '" + op.substr(0, 64) + "'");
}

json Supervisor::reload_refusal() const {
  if (m_snapshots->creating()) return error("busy", "a snapshot is being created; try again when it is done");
  if (is_terminal(m_state)) return error("busy", std::string("the supervisor is ") + state_name(m_state));
  if (m_reload.pending()) return error("busy", "a reload is already in progress");
  return nullptr;
}

// No flags pushed (systemctl reload, SIGHUP): re-read the config file and apply what changed. The config's
// flags, when they changed, start a reload as a push that replaces the flags would.
json Supervisor::reread_config(std::shared_ptr<std::promise<json>> waiter) {
  auto c = load_config(m_cfg.path);
  if (!c.ok()) return error("invalid_argument", "keeping the running config: " + c.error().message);
  register_secrets(c->engine);
  if (auto st = check_engine_config(*c); !st.ok())
    return error("invalid_argument", "keeping the running config: " + st.error().message);
  // Where the engine serves and the front's settings are fixed at fastrestartd's start (config_reread.h).
  auto r = reread(m_cfg, *c);
  if (!r.ok()) {
    spdlog::error("re-read {}: refused, nothing changed: {}", m_cfg.path, r.error().message);
    return error("refused", "keeping the running config: " + r.error().message);
  }
  if (r->kind_deferred)
    spdlog::warn("re-read {}: engine.kind and engine.vllm_rules take effect at fastrestartd's next start (still {})",
                 m_cfg.path, engine_kind_name(m_kind->kind()));
  m_cfg = std::move(r->config);  // in place: the parts hold a reference to it
  m_standby->maybe_spawn();  // a standby started from the old config is replaced now (docs/standby.md)
  if (!r->flags_changed)
    return {{"ok", true}, {"path", "unchanged"}, {"flags", m_reload.flags().redacted()}, {"message", "re-read " + m_cfg.path + ": the engine's flags are unchanged"}};
  return start_reload(m_cfg.engine.flags, std::move(waiter));
}

json Supervisor::start_reload(const FlagList& next, Reload::Waiter waiter) {
  const FlagList& flags = m_reload.flags();
  if (next == flags && engine_serving())
    return {{"ok", true}, {"path", "unchanged"}, {"flags", flags.redacted()}, {"message", "the flags are unchanged"}};
  // Checks before a flag push: nothing restarts when vLLM would not start with these flags.
  if (auto why = refuse_push(next); !why.empty()) {
    spdlog::error("reload refused: {}", escape_control_chars(why));
    return error("refused", "refused, nothing restarted: " + why);
  }
  auto affecting = daemon_affecting_changes(m_kind->flag_rules(), flags, next);
  spdlog::info("reload: flags now '{}' ({})", next.for_log(),
               affecting.empty() ? "engine only, warm cache" : "changes what the daemons hold: cold");
  m_reload.begin(next, !affecting.empty(), m_loop.now_s(), std::move(waiter));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", monotonic_usec());
  m_notify->notify(std::string("RELOADING=1\nMONOTONIC_USEC=") + buf + "\nSTATUS=Reloading (" +
                   (m_reload.cold() ? "cold" : "warm") + ")");
  raise(m_reload.cold() ? Event::kColdReloadRequested : Event::kRestartRequested);
  return m_reload.started_reply();
}

void Supervisor::roll_back(const Rollback& r, bool posted) {
  m_stats.rollback(r.cause, r.detail, r.rejected_flags, std::time(nullptr));
  if (!posted) return raise(r.cold ? Event::kDrainedColdRestart : Event::kDrainedRestart);
  const bool cold = r.cold;
  m_loop.post([this, cold] { raise(cold ? Event::kColdReloadRequested : Event::kRestartRequested); });
}

json Supervisor::status_json() {
  status::SupervisorStatus st;
  st.daemons = m_daemons->rows();
  if (m_cfg.weights.backend != "host") {
    m_standby->measure_memory(/*at_park=*/false);  // current: a parked standby's processes may have grown since its park
    // One share per GPU, in gpus order (gpu_shares()): what the daemon holds outside the engine, the reserve.
    const std::vector<GpuShare> shares = gpu_shares();
    for (size_t i = 0; i < m_cfg.gpus.size() && i < shares.size(); ++i)
      st.memory.push_back(memory_row(m_cfg.gpus[i], m_gpus->memory(m_cfg.gpus[i]), m_cfg.memory.utilization, shares[i]));
  }
  if (!m_share_refused.empty()) st.engine_share_refused = m_share_refused;
  st.arena_outcome = arena_outcome();
  if (m_engine) st.engine = engine_row(*m_engine, m_loop.now_s());
  m_stats.fill(st);
  st.name = m_cfg.name;
  st.config = m_cfg.path;
  st.state = reported_state_name(m_state);
  st.status_text = m_status_text;
  st.uptime_s = m_loop.now_s() - m_started_at;
  st.flags = m_reload.flags().redacted();
  st.last_exit = m_last_exit;
  st.last_start = m_last_start;
  st.start_paths = m_attempts.rows();
  st.memory_utilization = m_cfg.memory.utilization;
  st.backoff_s = m_policy.backoff_s();
  st.failure = m_failure;
  st.reload_in_progress = m_reload.pending();
  for (const auto& p : m_parts) p->fill_status(st);
  if (m_front) st.front = m_front->status();
  json out = to_json(st);
  // The running engine's KV cache survival (kv_stats.h): null until it printed its line.
  std::optional<status::KvCacheStatus> kv;
  if (m_engine && !m_engine->exited) kv = kv_cache_of(m_engine->pid, state_path(m_cfg, kKvStatsFileName));
  out["kv_cache"] = kv ? status::to_json(*kv) : json(nullptr);
  return out;
}

}  // namespace fr::supervisor
