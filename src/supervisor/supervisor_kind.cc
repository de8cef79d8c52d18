// The Supervisor's questions to its engine kind (m_kind, engines/engine_kind.h) that touch its own counters
// and state: the model readiness asks for, the checks before a push. (The engine's own word on its weights:
// attach_path.h.)
#include <spdlog/spdlog.h>

#include "supervisor/engines/check.h"
#include "supervisor/supervisor.h"

namespace fr::supervisor {

using nlohmann::json;

std::string Supervisor::readiness_model() const { return m_engine ? m_kind->readiness_model(m_engine->flags) : std::string(); }

std::string Supervisor::refuse_push(const FlagList& next) {
  const FlagCheck check = m_kind->check_flags(m_cfg, next, /*own_environment=*/true);
  for (const auto& f : check.findings)
    if (!f.error) spdlog::warn("check: {}", f.message);
  return check.refusal;
}

json Supervisor::handle_check(const ControlRequest& req) {
  return check_reply({m_cfg, *m_kind, m_reload.flags(), /*own_environment=*/true}, pushed_flags(req, m_reload.flags()), /*with_would=*/true);
}

}  // namespace fr::supervisor
