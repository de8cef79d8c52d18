#include "supervisor/engines/vllm/vllm_lint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "common/io.h"
#include "supervisor/flags.h"

extern char** environ;

namespace fr::supervisor {
namespace {

std::string join(const std::vector<std::string>& v, const char* sep = " ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// "--tokenizer-mode slow" as the user wrote it.
std::string spelled(const Flag& f) {
  if (f.values.empty()) return f.name;
  if (f.inline_value) return f.name + "=" + join(f.values);
  return f.name + " " + join(f.values);
}

std::string tail(const std::string& what, const std::string& use, const std::string& ref) {
  std::string s = what;
  if (!use.empty()) s += "; use " + use;
  if (!ref.empty()) s += " [" + ref + "]";
  return s;
}

bool contains(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Whether a [[preload.refuse]] rule refuses this occurrence of its flag.
bool refuses(const PreloadRefusal& r, const Flag& f) {
  if (!r.allow.empty() || !r.allow_prefix.empty()) {
    if (f.values.empty()) return false;  // argparse reports a flag without its value itself
    const std::string& v = f.values.back();
    if (contains(r.allow, v)) return false;
    return std::none_of(r.allow_prefix.begin(), r.allow_prefix.end(), [&](const std::string& p) { return v.starts_with(p); });
  }
  if (r.values.empty()) return true;
  return std::any_of(f.values.begin(), f.values.end(), [&](const std::string& x) { return contains(r.values, x); });
}

bool value_matches(const Flag& f, const RemovedRule& r) {
  if (r.value.empty() && r.value_contains.empty()) return true;
  for (const auto& v : f.values) {
    if (!r.value.empty() && v == r.value) return true;
    if (!r.value_contains.empty() && v.find(r.value_contains) != std::string::npos) return true;
  }
  return false;
}

// The checks of weights.daemon = "vllm-preload" (what `vllm serve --load-format ipc_cache` refuses).
void lint_preload(const VllmRules& rules, const LintTarget& target, const LintInput& in, const std::vector<Flag>& flags,
                  std::vector<LintFinding>& out) {
  auto add = [&](const std::string& subject, const std::string& msg) {
    out.push_back({Severity::kError, subject, subject + ": " + msg});
  };
  const std::string v = target.version.str();
  if (target.version < rules.preload_since)
    add("weights.daemon = \"vllm-preload\"",
        "`vllm preload` needs vLLM >= " + rules.preload_since.str() + ", checked against " + v + " (" + target.source + ")");
  const std::string not_with = "not with weights.daemon = \"vllm-preload\": ";
  const PreloadQuantization& q = rules.preload_quantization;
  for (const auto& f : flags) {
    const std::string name = canonical_flag_name(f.name);
    if (name == "--load-format" && !f.values.empty() && f.values.back() == "ipc_cache")
      add(spelled(f),
          "with weights.daemon = \"vllm-preload\" fastrestartd adds --load-format ipc_cache to vllm serve itself; "
          "a --load-format in engine.flags is what `vllm preload` loads with, and the daemon must load from disk");
    if (name == "--quantization" && !f.values.empty() && !contains(q.allow, f.values.back()))
      add(spelled(f), not_with + q.why);
    if (name == "--model-loader-extra-config" && !f.values.empty()) {
      // engine.flags' extra config goes to the ipc_cache loader only (vllm preload does not get it).
      auto j = parse_json_or_discarded(f.values.back(), kSmallJsonLimits);
      if (!j.is_object()) {
        add(spelled(f), "not a JSON object; the ipc_cache loader reads its options from one");
      } else {
        std::vector<std::string> unexpected;
        for (auto it = j.begin(); it != j.end(); ++it)
          if (!contains(rules.preload_extra_config_keys, it.key())) unexpected.push_back("'" + it.key() + "'");
        if (!unexpected.empty()) {
          std::string keys, allowed;
          for (const auto& k : unexpected) keys += (keys.empty() ? "" : ", ") + k;
          for (const auto& k : rules.preload_extra_config_keys) allowed += (allowed.empty() ? "" : ", ") + k;
          add("--model-loader-extra-config",
              "vLLM would fail every start: \"Unexpected extra config keys for load format ipc_cache: [" + keys +
                  "]\" (the ipc_cache loader takes " + allowed + "; with weights.daemon = \"vllm-preload\" "
                  "engine.flags' extra config is the ipc_cache loader's)");
        }
      }
    }
    for (const auto& r : rules.preload_refuse) {
      if (r.flag != name || (!r.mode.empty() && r.mode != weights_mode_name(in.mode)) || !refuses(r, f)) continue;
      add(spelled(f), not_with + r.why);
    }
  }
  // vLLM detects a checkpoint's quantization without --quantization: its config.json says it.
  const CheckpointFacts& c = in.checkpoint;
  if (!c.quant_method.empty()) {
    const std::string spelled_method = c.quant_method + (c.quant_algo.empty() ? "" : ":" + c.quant_algo);
    const bool allowed = contains(q.checkpoint_allow, c.quant_method) || (!c.quant_algo.empty() && contains(q.checkpoint_allow, spelled_method));
    if (!allowed)
      add(c.source + ": quantization \"" + spelled_method + "\"", not_with + q.why);
    for (const auto& a : c.architectures)
      if (allowed && contains(q.except_architectures, a))
        add(c.source + ": " + a + " quantized \"" + spelled_method + "\"",
            not_with + "the ipc_cache loader does not support quantized " + a + " checkpoints (vLLM docs/features/preload.md, Requirements)");
  }
}

}  // namespace

CheckpointFacts read_checkpoint_facts(const FlagList& flags) {
  CheckpointFacts out;
  std::string model = flags.positional();
  if (model.empty()) model = flags.value("--model");
  std::error_code ec;
  if (model.empty() || !std::filesystem::is_directory(model, ec)) return out;
  auto read_json = [](const std::string& path) {
    auto text = read_file(path, 16 << 20);
    return text.ok() ? parse_json_or_discarded(*text, kFrameJsonLimits) : nlohmann::json();
  };
  const std::string config_path = model + "/config.json";
  auto config = read_json(config_path);
  if (!config.is_object()) return out;
  if (auto a = config.find("architectures"); a != config.end() && a->is_array())
    for (const auto& x : *a)
      if (x.is_string()) out.architectures.push_back(x.get<std::string>());
  auto text_of = [](const nlohmann::json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (auto q = config.find("quantization_config"); q != config.end() && q->is_object()) {
    out.source = config_path;
    out.quant_method = text_of(*q, "quant_method");
    out.quant_algo = text_of(*q, "quant_algo");
    if (out.quant_algo.empty())
      if (auto sec = q->find("quantization"); sec != q->end() && sec->is_object()) out.quant_algo = text_of(*sec, "quant_algo");
    return out;
  }
  // ModelOpt checkpoints may say it in hf_quant_config.json instead ({"quantization": {"quant_algo": ...}}).
  const std::string modelopt_path = model + "/hf_quant_config.json";
  auto modelopt = read_json(modelopt_path);
  if (modelopt.is_object())
    if (auto sec = modelopt.find("quantization"); sec != modelopt.end() && sec->is_object()) {
      out.source = modelopt_path;
      out.quant_method = "modelopt";
      out.quant_algo = text_of(*sec, "quant_algo");
    }
  return out;
}

LintTarget lint_target(const VllmRules& rules, const std::string& reported, const std::string& configured) {
  if (auto v = VllmVersion::parse(reported)) return {*v, "reported by the engine at its last start"};
  if (auto v = VllmVersion::parse(configured)) return {*v, "engine.vllm_version"};
  return {rules.newest, "assumed: the newest release the rules cover; set engine.vllm_version to the one you run"};
}

std::vector<LintFinding> lint_vllm(const VllmRules& rules, const LintTarget& target, const LintInput& in) {
  std::vector<LintFinding> out;
  const std::string v = target.version.str();
  auto add = [&](Severity s, std::string subject, const std::string& msg) {
    out.push_back({s, subject, subject + ": " + msg});
  };
  const auto& flags = in.flags.flags();
  auto present = [&](const std::string& canonical) { return in.flags.has(canonical); };

  for (const auto& f : flags) {
    if (f.name.empty()) continue;
    const std::string name = canonical_flag_name(f.name);
    for (const auto& r : rules.removed) {
      if (r.flag != name || target.version < r.version || !value_matches(f, r)) continue;
      const char* verb = r.severity == Severity::kError ? "vLLM " : "since vLLM ";
      add(r.severity, spelled(f), std::string(verb) + r.version.str() + ": " + tail(r.what.empty() ? "removed" : r.what, r.use, r.ref));
    }
    for (const auto& a : rules.added) {
      if (target.version >= a.version) continue;
      if (std::find(a.flags.begin(), a.flags.end(), name) != a.flags.end())
        add(Severity::kError, f.name, "needs vLLM >= " + a.version.str() + ", checked against " + v + " (" + target.source + ")");
    }
  }
  for (const auto& g : rules.gated) {
    if (target.version < g.version || present(g.unless)) continue;
    for (const auto& w : g.when_any) {
      if (!present(w)) continue;
      add(g.severity, w, "since vLLM " + g.version.str() + ": " + tail(g.what, g.use, g.ref));
      break;
    }
  }
  // vLLM ignores a VLLM_* variable it does not know ("Unknown vLLM environment variable detected", a
  // warning) unless --fail-on-environ-validation makes that fatal: a removed variable loses its effect
  // silently, which is worth a warning, but it stops a start only with that flag.
  const bool env_fatal = present("--fail-on-environ-validation");
  auto check_env = [&](const std::map<std::string, std::string>& env, const char* where) {
    for (const auto& [name, value] : env)
      for (const auto& r : rules.removed)
        if (r.env == name && target.version >= r.version)
          add(env_fatal ? Severity::kError : Severity::kWarning, name + where,
              "vLLM " + r.version.str() + ": " + tail(r.what.empty() ? "removed" : r.what, r.use, r.ref) +
                  (env_fatal ? " (fatal with --fail-on-environ-validation)" : " (vLLM now ignores it)"));
  };
  check_env(in.env, " (engine.env)");
  check_env(in.inherited, " (in fastrestartd's environment, inherited by the engine)");
  for (const auto& word : in.command)
    for (const auto& r : rules.removed)
      if (!r.command.empty() && word == r.command && target.version >= r.version)
        add(r.severity, "engine.command " + word, "vLLM " + r.version.str() + ": " + tail(r.what, r.use, r.ref));

  if (in.daemon == DaemonKind::kVllmPreload) lint_preload(rules, target, in, flags, out);
  std::stable_sort(out.begin(), out.end(), [](const LintFinding& a, const LintFinding& b) {
    return a.severity == Severity::kError && b.severity != Severity::kError;
  });
  return out;
}

std::vector<LintFinding> lint_config(const Config& c, const VllmRules& rules) {
  LintInput in{c.engine.command, c.engine.flags, c.engine.env, {}, c.weights.daemon, c.weights.mode, {}};
  if (c.weights.daemon == DaemonKind::kVllmPreload) in.checkpoint = read_checkpoint_facts(c.engine.flags);
  return lint_vllm(rules, lint_target(rules, "", c.engine.vllm_version), in);
}

bool has_errors(const std::vector<LintFinding>& findings) {
  return std::any_of(findings.begin(), findings.end(), [](const LintFinding& f) { return f.severity == Severity::kError; });
}

std::string describe_findings(const std::vector<LintFinding>& findings, const LintTarget& target) {
  size_t errors = 0;
  std::string msgs;
  for (const auto& f : findings) {
    if (f.severity != Severity::kError) continue;
    ++errors;
    msgs += (msgs.empty() ? "" : "; ") + f.message;
  }
  return std::to_string(errors) + (errors == 1 ? " flag" : " flags") + " vLLM " + target.version.str() +
         " would not start with (" + target.source + "): " + msgs;
}

std::map<std::string, std::string> vllm_environment() {
  std::map<std::string, std::string> out;
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "VLLM_", 5) != 0) continue;
    const char* eq = std::strchr(*e, '=');
    if (!eq) continue;
    out.emplace(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  return out;
}

}  // namespace fr::supervisor
