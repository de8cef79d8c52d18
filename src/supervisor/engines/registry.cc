// The engine kinds by name: adding a kind is its folder (an EngineAdapter, engine_kind.h) and one entry
// here, with its factories' declarations (ARCHITECTURE.md, "How to add an engine kind").
#include <array>
#include <cstdlib>
#include <map>
#include <mutex>

#include "supervisor/engines/engine_kind.h"
#include "supervisor/engines/vllm/vllm_adapter.h"

namespace fr::supervisor {

// generic/generic_adapter.cc
Result<std::unique_ptr<EngineAdapter>> make_generic_adapter(const Config& c);
std::unique_ptr<EngineAdapter> make_builtin_generic_adapter();

namespace {

std::unique_ptr<EngineAdapter> make_builtin_vllm_adapter() { return std::make_unique<VllmAdapter>(builtin_vllm_rules()); }

// The first entry is the default (engine.kind left out).
const EngineKindEntry kKinds[] = {
    {EngineKind::kGeneric, make_generic_adapter, make_builtin_generic_adapter},
    {EngineKind::kVllm, VllmAdapter::make, make_builtin_vllm_adapter},
};

const EngineKindEntry& entry(EngineKind k) {
  for (const auto& e : kKinds)
    if (e.kind == k) return e;
  std::abort();  // an EngineKind is made from a registered name only (config.cc, the constants in config.h)
}

}  // namespace

std::span<const EngineKindEntry> engine_kinds() { return kKinds; }

std::span<const char* const> engine_kind_names() {
  static const auto names = [] {
    std::array<const char*, std::size(kKinds)> out{};
    for (size_t i = 0; i < std::size(kKinds); ++i) out[i] = kKinds[i].kind.name();
    return out;
  }();
  return names;
}

Result<std::unique_ptr<EngineAdapter>> make_engine_adapter(const Config& c) { return entry(c.engine.kind).make(c); }

std::unique_ptr<EngineAdapter> make_builtin_engine_adapter(EngineKind k) { return entry(k).make_builtin(); }

const EngineAdapter& builtin_engine_adapter(EngineKind k) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<EngineAdapter>> made;
  std::lock_guard lock(mu);
  auto& a = made[k.name()];
  if (!a) a = entry(k).make_builtin();
  return *a;
}

Status check_engine_config(const Config& c) {
  FR_ASSIGN(auto kind, make_engine_adapter(c));
  return kind->check_config(c);
}

}  // namespace fr::supervisor
