// engine.kind = "vllm" (docs/vllm.md): the EngineAdapter whose rules are data/vllm.toml (plus
// engine.vllm_rules): its daemon-affecting flags, the checks of its flags and environment (vllm_lint.h),
// what its output says (vllm_report.h), the served model name readiness asks for, and the flags of
// `vllm serve` with `vllm preload` as the weight daemon.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "supervisor/engines/engine_kind.h"
#include "supervisor/engines/vllm/vllm_rules.h"

namespace fr::supervisor {

class VllmAdapter final : public EngineAdapter {
 public:
  explicit VllmAdapter(VllmRules rules);
  // With engine.vllm_rules appended to the built-in rules; an unreadable file names the key.
  static Result<std::unique_ptr<EngineAdapter>> make(const Config& c);

  EngineKind kind() const override { return EngineKind::kVllm; }
  const FlagRules& flag_rules() const override { return m_flag_rules; }
  Status check_config(const Config& c) const override;
  std::vector<std::string> config_warnings(const Config& c) const override;
  FlagCheck check_flags(const Config& c, const FlagList& flags, bool own_environment) const override;
  std::unique_ptr<EngineReport> new_report() override;
  std::optional<EngineProgress> progress(const std::string& line) const override;
  std::vector<OutputRule> failure_rules() const override;
  bool reports_attach() const override { return true; }
  std::string readiness_model(const FlagList& flags) const override;
  std::string local_model_path(const FlagList& flags) const override;
  bool passes_to_preload(const std::string& canonical) const override;
  void flags_for_preload(FlagList& flags, const PreloadUse& use) const override;

  const VllmRules& rules() const { return m_rules; }
  // The version the last engine reported ("" before any did): checks are made against it.
  const std::string& reported_version() const { return m_reported_version; }
  void note_reported_version(const std::string& version);  // logs a change

 private:
  VllmRules m_rules;
  FlagRules m_flag_rules;
  std::string m_reported_version;
};

// The model of `vllm serve MODEL` flags: the positional wins over --model, as in vLLM.
std::string vllm_model_of(const FlagList& flags);

}  // namespace fr::supervisor
