#include "supervisor/engines/vllm/vllm_lint.h"

#include <algorithm>
#include <cstring>

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

bool value_matches(const Flag& f, const RemovedRule& r) {
  if (r.value.empty() && r.value_contains.empty()) return true;
  for (const auto& v : f.values) {
    if (!r.value.empty() && v == r.value) return true;
    if (!r.value_contains.empty() && v.find(r.value_contains) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

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
  const auto flags = parse_flag_list(in.flags);
  auto present = [&](const std::string& canonical) {
    return std::any_of(flags.begin(), flags.end(), [&](const Flag& f) { return canonical_flag_name(f.name) == canonical; });
  };

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

  if (in.daemon == DaemonKind::kVllmPreload) {
    if (target.version < rules.preload_since)
      add(Severity::kError, "weights.daemon = \"vllm-preload\"",
          "`vllm preload` needs vLLM >= " + rules.preload_since.str() + ", checked against " + v + " (" + target.source + ")");
    for (const auto& f : flags) {
      const std::string name = canonical_flag_name(f.name);
      if (name == "--load-format" && !f.values.empty() && f.values.back() == "ipc_cache")
        add(Severity::kError, spelled(f),
            "with weights.daemon = \"vllm-preload\" fastrestartd adds --load-format ipc_cache to vllm serve itself; "
            "a --load-format in engine.flags is what `vllm preload` loads with, and the daemon must load from disk");
      for (const auto& r : rules.preload_refuse) {
        if (r.flag != name || (!r.mode.empty() && r.mode != weights_mode_name(in.mode))) continue;
        if (!r.values.empty() &&
            std::none_of(f.values.begin(), f.values.end(), [&](const std::string& x) {
              return std::find(r.values.begin(), r.values.end(), x) != r.values.end();
            }))
          continue;
        add(Severity::kError, spelled(f), "not with weights.daemon = \"vllm-preload\": " + r.why);
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const LintFinding& a, const LintFinding& b) {
    return a.severity == Severity::kError && b.severity != Severity::kError;
  });
  return out;
}

std::vector<LintFinding> lint_config(const Config& c, const VllmRules& rules) {
  LintInput in{c.engine.command, c.engine.flags, c.engine.env, {}, c.weights.daemon, c.weights.mode};
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
