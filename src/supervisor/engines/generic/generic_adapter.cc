// engine.kind = "generic": any command. The supervisor knows nothing of its flags beyond the shared
// spelling rules (flags.h): no flag reloads the daemons unless the operator lists it, there are no checks
// before a push, and its output is read only for the common progress line (engine_progress.h). Whether it
// attached comes from the daemons' records alone.
#include "supervisor/engines/engine_kind.h"

namespace fr::supervisor {
namespace {

class GenericAdapter final : public EngineAdapter {
 public:
  EngineKind kind() const override { return EngineKind::kGeneric; }
  const FlagRules& flag_rules() const override { return m_rules; }

 private:
  FlagRules m_rules;  // none
};

}  // namespace

std::unique_ptr<EngineAdapter> make_builtin_generic_adapter() { return std::make_unique<GenericAdapter>(); }

Result<std::unique_ptr<EngineAdapter>> make_generic_adapter(const Config&) { return make_builtin_generic_adapter(); }

}  // namespace fr::supervisor
