// The vLLM engine kind (vllm_adapter.h). The rules are data (data/vllm.toml); this file applies them.
#include "supervisor/engines/vllm/vllm_adapter.h"

#include <algorithm>
#include <filesystem>
#include <spdlog/spdlog.h>

#include "common/bounded_json.h"
#include "common/control_chars.h"
#include "supervisor/engines/vllm/vllm_lint.h"
#include "supervisor/engines/vllm/vllm_report.h"

namespace fr::supervisor {

using nlohmann::json;

namespace {

// What one vLLM engine said: its version and model runner, vLLM's weight-cache result, the loader plugin's lines.
class VllmEngineReport final : public EngineReport {
 public:
  explicit VllmEngineReport(VllmAdapter& kind) : m_kind(kind) {}

  void observe(const std::string& line) override {
    const std::string runner = m_report.get("model_runner");
    if (!m_report.observe(m_kind.rules(), line)) return;
    if (m_report.get("model_runner") != runner)
      spdlog::info("the engine reports model runner {}", escape_control_chars(m_report.get("model_runner")));
    if (std::string v = m_report.get("version"); !v.empty()) m_kind.note_reported_version(v);
  }

  void finish() override { m_report.finish(m_kind.rules()); }

  AttachWord attach_word() const override {
    AttachWord w;
    // The plugin's result lines (one per rank): warm only when every rank attached.
    if (!m_report.loader.empty()) {
      bool all_hit = true;
      for (const auto& r : m_report.loader) {
        if (r.result == "hit") continue;
        all_hit = false;
        w.misses.push_back((r.result + ": " + r.reason).substr(0, 80));
        if (w.miss_reason.empty()) w.miss_reason = "the engine's loader reported " + r.result + ": " + r.reason;
      }
      w.counted = all_hit ? "hit" : "fallback";
      w.path = all_hit ? "warm" : "cold";
      return w;
    }
    const std::string wc = m_report.get("weight_cache");
    if (wc == "hit") return {"warm", "hit", {}, {}};
    if (wc == "fallback") {
      auto it = m_report.fields.find("weight_cache");
      std::string why = it->second.line;
      size_t open = why.find("Weight cache unusable (");
      if (open != std::string::npos) why = why.substr(open + 23, why.find(')', open) - open - 23);
      spdlog::info("the engine did not use the weight cache ({}) and loaded from disk", escape_control_chars(why));
      return {"cold", "fallback", {why.substr(0, 80)}, "the engine reported: " + why};
    }
    return {"", "none", {}, {}};
  }

  json to_json() const override { return m_report.to_json(); }

 private:
  VllmAdapter& m_kind;
  VllmReport m_report;
};

FlagFinding finding(const LintFinding& f) { return {f.severity == Severity::kError, f.subject, f.message}; }

}  // namespace

std::string vllm_model_of(const FlagList& flags) {
  if (std::string m = flags.positional(); !m.empty()) return m;
  return flags.value("--model");
}

VllmAdapter::VllmAdapter(VllmRules rules) : m_rules(std::move(rules)) {
  // The built-in [daemon] flags and an operator's, once each.
  for (const auto& f : m_rules.daemon_flags) {
    std::string name = canonical_flag_name(f);
    if (name.empty()) name = "--model";
    auto& watched = m_flag_rules.daemon_flags;
    if (std::find(watched.begin(), watched.end(), name) == watched.end()) watched.push_back(std::move(name));
  }
  m_flag_rules.positional = "--model";  // `vllm serve MODEL` sets args.model from the positional, over any --model
}

Result<std::unique_ptr<EngineAdapter>> VllmAdapter::make(const Config& c) {
  auto rules = load_vllm_rules(c.engine.vllm_rules);
  if (!rules.ok()) return config_error_at(c, {"engine.vllm_rules", "engine"}, "engine.vllm_rules", rules.error().message);
  return std::unique_ptr<EngineAdapter>(std::make_unique<VllmAdapter>(std::move(*rules)));
}

void VllmAdapter::note_reported_version(const std::string& v) {
  if (v.empty() || v == m_reported_version) return;
  m_reported_version = v;
  spdlog::info("the engine reports vLLM {}", escape_control_chars(v));
}

// Flags vLLM would refuse (data/vllm.toml) are a config error, named like any other (docs/vllm.md, "Checks
// before a flag push"). Warnings are left to --check and `fastrestartctl check`.
Status VllmAdapter::check_config(const Config& c) const {
  LintTarget target = lint_target(m_rules, "", c.engine.vllm_version);
  for (const auto& f : lint_config(c, m_rules)) {
    if (f.severity != Severity::kError) continue;
    const bool env = f.subject.find("(engine.env)") != std::string::npos;
    const bool command = f.subject.starts_with("engine.command");
    const bool daemon = f.subject.starts_with("weights.daemon");
    const char* key = env ? "engine.env" : command ? "engine.command" : daemon ? "weights.daemon" : "engine.flags";
    return config_error_at(c, {key, "engine"}, key, f.message + " (checked against vLLM " + target.version.str() + ": " + target.source + ")");
  }
  return {};
}

std::vector<std::string> VllmAdapter::config_warnings(const Config& c) const {
  std::vector<std::string> out;
  for (const auto& f : lint_config(c, m_rules)) out.push_back(f.message);
  return out;
}

FlagCheck VllmAdapter::check_flags(const Config& c, const FlagList& flags, bool own_environment) const {
  LintTarget t = lint_target(m_rules, m_reported_version, c.engine.vllm_version);
  LintInput in{c.engine.command, flags, c.engine.env, own_environment ? vllm_environment() : std::map<std::string, std::string>{},
               c.weights.daemon, c.weights.mode, {}};
  if (c.weights.daemon == DaemonKind::kVllmPreload) in.checkpoint = read_checkpoint_facts(flags);
  const auto found = lint_vllm(m_rules, t, in);
  FlagCheck out;
  out.checked_against = {{"version", t.version.str()}, {"source", t.source}};
  for (const auto& f : found) out.findings.push_back(finding(f));
  if (has_errors(found)) out.refusal = describe_findings(found, t);
  return out;
}

std::unique_ptr<EngineReport> VllmAdapter::new_report() { return std::make_unique<VllmEngineReport>(*this); }

std::optional<EngineProgress> VllmAdapter::progress(const std::string& line) const {
  return parse_progress_pattern(m_rules.progress, line);  // [[progress]]: vLLM's tqdm bars
}

std::vector<OutputRule> VllmAdapter::failure_rules() const {
  std::vector<OutputRule> out;
  for (const auto& f : m_rules.failures)
    if (auto cause = exit_cause_from_name(f.cause)) out.push_back({f.contains, *cause});
  return out;
}

std::string VllmAdapter::readiness_model(const FlagList& flags) const {
  for (const auto& f : flags.flags())
    if (canonical_flag_name(f.name) == "--served-model-name" && !f.values.empty()) return f.values.front();
  return vllm_model_of(flags);
}

std::string VllmAdapter::local_model_path(const FlagList& flags) const {
  std::string m = vllm_model_of(flags);
  std::error_code ec;
  return !m.empty() && std::filesystem::exists(m, ec) ? m : std::string();
}

bool VllmAdapter::passes_to_preload(const std::string& name) const {
  const auto& daemon = m_rules.daemon_flags;
  const auto& pass = m_rules.preload_pass;
  return std::find(daemon.begin(), daemon.end(), name) != daemon.end() || std::find(pass.begin(), pass.end(), name) != pass.end();
}

// `vllm serve` in vllm-preload mode. While the preload serves: --load-format ipc_cache, and the loader's extra
// config with fallback false on the first start after the preload (re)started (a mismatch then fails loudly
// instead of loading from disk next to the daemon), the configured value after. While it does not (it failed,
// died or was never started): the engine flags as they are, so vLLM loads from disk with engine.flags'
// --load-format (its default without one). Not ipc_cache with fallback: the ipc_cache loader raises its
// unsupported-quantization and unsupported-platform errors even with fallback, so a preload that failed for
// such a reason would fail every engine start too (a crash loop).
void VllmAdapter::flags_for_preload(FlagList& flags, const PreloadUse& use) const {
  if (!use.serving) {
    // engine.flags' extra config holds the ipc_cache loader's keys only (the flag checks refuse others),
    // which vLLM's default loader refuses in turn ("Unexpected extra config keys").
    flags = flags.without("--model-loader-extra-config");
    std::string format = flags.value("--load-format");
    spdlog::warn("vllm preload is not serving; the engine loads from disk with --load-format {}",
                 format.empty() ? "(vLLM's default)" : format);
    return;
  }
  json extra = json::object();
  if (flags.has("--model-loader-extra-config")) {
    // A pushed flag comes from a control-socket peer: bounded like its frame (copying recurses per level).
    auto j = parse_json_or_discarded(flags.value("--model-loader-extra-config"), kSmallJsonLimits);
    if (j.is_object()) extra = j;
    else spdlog::warn("--model-loader-extra-config is not a JSON object; replacing it");
  }
  // Only the keys the ipc_cache loader takes: any other fails the start ("Unexpected extra config keys").
  // The flag checks refuse them before a push; this keeps a key out that a rules file no longer allows.
  for (auto it = extra.begin(); it != extra.end();) {
    const auto& keys = m_rules.preload_extra_config_keys;
    if (std::find(keys.begin(), keys.end(), it.key()) != keys.end()) {
      ++it;
      continue;
    }
    spdlog::warn("--model-loader-extra-config: dropping '{}', which the ipc_cache loader does not take", it.key());
    it = extra.erase(it);
  }
  extra["fallback"] = use.strict ? false : use.fallback;
  extra["mode"] = weights_mode_name(use.mode);
  if (!use.socket_dir.empty()) extra["socket_dir"] = use.socket_dir;
  // ensure_ascii: every control character (DEL and the C0 ones) and every non-ASCII byte is written as a
  // \u escape, so the word stays printable (FlagList).
  flags = flags.without("--load-format")
              .without("--model-loader-extra-config")
              .with({"--load-format", {"ipc_cache"}, false})
              .with({"--model-loader-extra-config", {extra.dump(-1, ' ', /*ensure_ascii=*/true)}, false});
}

}  // namespace fr::supervisor
