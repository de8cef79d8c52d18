#include "supervisor/config_reread.h"

namespace fr::supervisor {

Result<Reread> reread(const Config& running, const Config& next) {
  if (auto why = address_change(running.engine, next.engine); !why.empty()) return make_error(Errc::kInvalidArgument, why);
  if (auto why = front_change(running.front, next.front); !why.empty()) return make_error(Errc::kInvalidArgument, why);
  Reread out{running};
  out.flags_changed = next.engine.flags != running.engine.flags;
  out.kind_deferred = !(next.engine.kind == running.engine.kind) || next.engine.vllm_rules != running.engine.vllm_rules;
  out.config.engine = next.engine;
  out.config.engine.kind = running.engine.kind;
  out.config.engine.vllm_rules = running.engine.vllm_rules;
  out.config.readiness = next.readiness;
  out.config.memory = next.memory;
  return out;
}

}  // namespace fr::supervisor
