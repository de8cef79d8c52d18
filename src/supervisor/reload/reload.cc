#include "supervisor/reload/reload.h"

#include <spdlog/spdlog.h>

#include "common/control_chars.h"
#include "supervisor/reload/flags_file.h"

namespace fr::supervisor {

using nlohmann::json;

Reload::Reload(std::string flags_path, const FlagList& config_flags)
    : m_path(std::move(flags_path)), m_flags(config_flags) {
  if (auto pushed = load_pushed_flags(m_path, config_flags)) {
    m_flags = std::move(*pushed);
    spdlog::info("using the pushed flags from {}", m_path);
  }
  m_last_ready = m_flags;
}

bool Reload::cold() const { return m_pending && m_pending->cold; }

bool Reload::on_trial() const { return m_pending && !m_pending->rolled_back; }

void Reload::begin(FlagList next, bool cold, double now, Waiter waiter) {
  m_pending = std::make_unique<Pending>();
  m_pending->old_flags = m_last_ready;
  m_pending->new_flags = next;
  m_pending->cold = cold;
  m_pending->started = now;
  if (waiter) m_pending->waiters.push_back(std::move(waiter));
  m_flags = std::move(next);
}

json Reload::started_reply() const {
  if (m_pending && m_pending->waiters.empty()) return {{"ok", true}, {"message", "reload started"}, {"cold", m_pending->cold}};
  return nullptr;
}

ReadyOutcome Reload::ready(const FlagList& engine_flags, const std::string& path, double now, const FlagList& config_flags) {
  m_last_ready = engine_flags;
  if (!m_pending) return {};
  Pending& r = *m_pending;
  const bool ok = !r.rolled_back;
  if (ok) {
    // Flags that cannot be persisted would be lost (or older ones run) at the next fastrestartd start:
    // the push fails, and the engine goes back to the flags that are on disk. The reload stays pending
    // and is answered, with the reason, once the engine is ready on them again.
    if (auto st = save_pushed_flags(m_path, m_flags, config_flags); !st.ok()) {
      const std::string why = st.error().message;
      spdlog::error("reload failed ({}); rolling back to: {}", escape_control_chars(why), r.old_flags.for_log());
      r.rolled_back = r.unpersisted = true;
      r.rollback_reason = why;
      m_flags = m_last_ready = r.old_flags;
      return {std::nullopt, Rollback{"unpersisted", why, r.new_flags.redacted(), r.cold}};
    }
  }
  const double took = now - r.started;
  json reply{{"ok", ok},
             {"path", path},
             {"cold_reload", r.cold},
             {"time_to_ready_s", took},
             {"flags", m_flags.redacted()},
             {"rolled_back", r.rolled_back}};
  if (ok) {
    spdlog::info("reload done in {:.2f} s ({})", took, path);
  } else {
    reply["error"] = {{"code", "rolled_back"},
                      {"message", (r.unpersisted ? r.rollback_reason : "the new flags never became ready (" + r.rollback_reason + ")") +
                                      "; rolled back to the last flags that were ready, and the engine is ready on them again"}};
  }
  const std::string outcome = r.rolled_back ? "rolled_back" : r.cold ? "cold" : "warm";
  answer(reply);
  return {outcome, std::nullopt};
}

std::optional<Rollback> Reload::after_exit(bool failure, const std::string& cause, const std::string& detail) {
  if (!failure || !on_trial()) return std::nullopt;
  // The pushed flags never became ready: go back to the last flags that were.
  Pending& r = *m_pending;
  r.rolled_back = true;
  r.rollback_reason = cause + ": " + detail;
  spdlog::error("reload failed ({}); rolling back to: {}", escape_control_chars(r.rollback_reason), r.old_flags.for_log());
  m_flags = r.old_flags;
  return Rollback{cause, detail, r.new_flags.redacted(), r.cold};
}

void Reload::close() {
  if (m_pending) answer(json{{"ok", false}, {"error", {{"code", "cancelled"}, {"message", "the supervisor stopped"}}}});
}

void Reload::answer(const json& reply) {
  auto r = std::move(m_pending);
  for (auto& w : r->waiters) w->set_value(reply);
}

}  // namespace fr::supervisor
