// Reading data/vllm.toml (and an operator's file of the same form). Every key is checked: an unknown key or
// a wrong type is an error naming file:line and the key, as in config.cc.
#include "supervisor/vllm_rules.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>

#include "common/io.h"
#include "supervisor/classify.h"
#include "supervisor/flags.h"
#include "supervisor/vllm_rules_data.h"

namespace fr::supervisor {

std::optional<VllmVersion> VllmVersion::parse(std::string_view s) {
  if (s.starts_with('v')) s.remove_prefix(1);
  VllmVersion v;
  size_t i = 0, part = 0;
  bool any = false;
  while (part < 3) {
    if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) break;
    int n = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      n = n * 10 + (s[i] - '0');
      if (n > 1000000) return std::nullopt;
      ++i;
    }
    v.parts[part++] = n;
    any = true;
    if (i < s.size() && s[i] == '.') ++i;
    else break;
  }
  if (!any || part < 2) return std::nullopt;  // "0.31" at least
  return v;
}

std::string VllmVersion::str() const {
  return std::to_string(parts[0]) + "." + std::to_string(parts[1]) + "." + std::to_string(parts[2]);
}

namespace {

class Reader {
 public:
  Reader(const std::string& path) : m_path(path) {}

  Error fail(const toml::node& n, const std::string& key, const std::string& what) const {
    int64_t line = std::max<int64_t>(1, n.source().begin.line);
    return make_error(Errc::kInvalidArgument, m_path + ":" + std::to_string(line) + ": " + key + ": " + what);
  }
  Result<std::string> string(const toml::node& n, const std::string& key) const {
    if (auto s = n.as_string()) return s->get();
    return fail(n, key, "expected a string");
  }
  Result<std::vector<std::string>> strings(const toml::node& n, const std::string& key) const {
    auto arr = n.as_array();
    if (!arr) return fail(n, key, "expected an array of strings");
    std::vector<std::string> out;
    for (size_t i = 0; i < arr->size(); ++i) {
      FR_ASSIGN(std::string s, string(*arr->get(i), key + "[" + std::to_string(i) + "]"));
      out.push_back(std::move(s));
    }
    return out;
  }
  Result<std::vector<std::string>> flag_names(const toml::node& n, const std::string& key) const {
    FR_ASSIGN(auto v, strings(n, key));
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].starts_with("-")) return fail(n, key + "[" + std::to_string(i) + "]", "a flag starts with '-', got \"" + v[i] + "\"");
      v[i] = canonical_flag_name(v[i]);
    }
    return v;
  }
  Result<VllmVersion> version(const toml::node& n, const std::string& key) const {
    FR_ASSIGN(std::string s, string(n, key));
    auto v = VllmVersion::parse(s);
    if (!v) return fail(n, key, "expected a vLLM version like \"0.31.0\", got \"" + s + "\"");
    return *v;
  }
  Result<Severity> severity(const toml::node& n, const std::string& key) const {
    FR_ASSIGN(std::string s, string(n, key));
    if (s == "error") return Severity::kError;
    if (s == "warning") return Severity::kWarning;
    return fail(n, key, "must be \"error\" or \"warning\", got \"" + s + "\"");
  }
  // Visits every key of `t`; `known` names the allowed ones.
  template <typename F>
  Status each(const toml::table& t, const std::string& prefix, std::initializer_list<const char*> known, F&& f) const {
    for (auto&& [k, n] : t) {
      std::string name(k.str());
      if (std::find_if(known.begin(), known.end(), [&](const char* x) { return name == x; }) == known.end()) {
        std::string allowed;
        for (const char* x : known) allowed += (allowed.empty() ? "" : ", ") + std::string(x);
        return fail(n, prefix + name, "unknown key (allowed: " + allowed + ")");
      }
      FR_TRY(f(name, n, prefix + name));
    }
    return {};
  }
  // An array of tables ([[name]]).
  template <typename F>
  Status tables(const toml::node& n, const std::string& key, F&& f) const {
    auto arr = n.as_array();
    if (!arr) return fail(n, key, "expected an array of tables ([[" + key + "]])");
    for (size_t i = 0; i < arr->size(); ++i) {
      auto t = arr->get(i)->as_table();
      std::string k = key + "[" + std::to_string(i) + "]";
      if (!t) return fail(*arr->get(i), k, "expected a table");
      FR_TRY(f(*t, k + "."));
    }
    return {};
  }
  const std::string& path() const { return m_path; }

 private:
  std::string m_path;
};

Status parse_removed(const Reader& r, const toml::table& t, const std::string& p, VllmRules& out) {
  RemovedRule rule;
  bool has_version = false;
  FR_TRY(r.each(t, p, {"flag", "env", "command", "value", "value_contains", "version", "severity", "what", "use", "ref"},
                [&](const std::string& k, const toml::node& n, const std::string& key) -> Status {
                  if (k == "flag") {
                    FR_ASSIGN(rule.flag, r.string(n, key));
                    if (!rule.flag.starts_with("-")) return r.fail(n, key, "a flag starts with '-'");
                    rule.flag = canonical_flag_name(rule.flag);
                  } else if (k == "env") {
                    FR_ASSIGN(rule.env, r.string(n, key));
                  } else if (k == "command") {
                    FR_ASSIGN(rule.command, r.string(n, key));
                  } else if (k == "value") {
                    FR_ASSIGN(rule.value, r.string(n, key));
                  } else if (k == "value_contains") {
                    FR_ASSIGN(rule.value_contains, r.string(n, key));
                  } else if (k == "version") {
                    FR_ASSIGN(rule.version, r.version(n, key));
                    has_version = true;
                  } else if (k == "severity") {
                    FR_ASSIGN(rule.severity, r.severity(n, key));
                  } else if (k == "what") {
                    FR_ASSIGN(rule.what, r.string(n, key));
                  } else if (k == "use") {
                    FR_ASSIGN(rule.use, r.string(n, key));
                  } else {
                    FR_ASSIGN(rule.ref, r.string(n, key));
                  }
                  return {};
                }));
  int subjects = !rule.flag.empty() + !rule.env.empty() + !rule.command.empty();
  if (subjects != 1) return r.fail(t, p + "flag", "exactly one of flag, env, command is required");
  if (!has_version) return r.fail(t, p + "version", "required: the vLLM release that removed or changed it");
  out.removed.push_back(std::move(rule));
  return {};
}

Status parse_gated(const Reader& r, const toml::table& t, const std::string& p, VllmRules& out) {
  GatedRule rule;
  bool has_version = false;
  FR_TRY(r.each(t, p, {"when_any", "unless", "version", "severity", "what", "use", "ref"},
                [&](const std::string& k, const toml::node& n, const std::string& key) -> Status {
                  if (k == "when_any") {
                    FR_ASSIGN(rule.when_any, r.flag_names(n, key));
                  } else if (k == "unless") {
                    FR_ASSIGN(rule.unless, r.string(n, key));
                    rule.unless = canonical_flag_name(rule.unless);
                  } else if (k == "version") {
                    FR_ASSIGN(rule.version, r.version(n, key));
                    has_version = true;
                  } else if (k == "severity") {
                    FR_ASSIGN(rule.severity, r.severity(n, key));
                  } else if (k == "what") {
                    FR_ASSIGN(rule.what, r.string(n, key));
                  } else if (k == "use") {
                    FR_ASSIGN(rule.use, r.string(n, key));
                  } else {
                    FR_ASSIGN(rule.ref, r.string(n, key));
                  }
                  return {};
                }));
  if (rule.when_any.empty() || rule.unless.empty() || !has_version)
    return r.fail(t, p + "when_any", "when_any, unless and version are required");
  out.gated.push_back(std::move(rule));
  return {};
}

Status parse_added(const Reader& r, const toml::table& t, const std::string& p, VllmRules& out) {
  AddedRule rule;
  bool has_version = false;
  FR_TRY(r.each(t, p, {"flags", "version"}, [&](const std::string& k, const toml::node& n, const std::string& key) -> Status {
    if (k == "flags") {
      FR_ASSIGN(rule.flags, r.flag_names(n, key));
    } else {
      FR_ASSIGN(rule.version, r.version(n, key));
      has_version = true;
    }
    return {};
  }));
  if (rule.flags.empty() || !has_version) return r.fail(t, p + "flags", "flags and version are required");
  out.added.push_back(std::move(rule));
  return {};
}

Status parse_failure(const Reader& r, const toml::table& t, const std::string& p, VllmRules& out) {
  FailureRule rule;
  FR_TRY(r.each(t, p, {"contains", "cause", "ref"}, [&](const std::string& k, const toml::node& n, const std::string& key) -> Status {
    if (k == "contains") {
      FR_ASSIGN(rule.contains, r.strings(n, key));
      for (const auto& c : rule.contains)
        if (c.empty()) return r.fail(n, key, "an empty string matches every line");
    } else if (k == "cause") {
      FR_ASSIGN(rule.cause, r.string(n, key));
      if (!exit_cause_from_name(rule.cause)) return r.fail(n, key, "unknown cause \"" + rule.cause + "\" (allowed: " + exit_cause_names() + ")");
    }
    return {};
  }));
  if (rule.contains.empty() || rule.cause.empty()) return r.fail(t, p + "contains", "contains and cause are required");
  out.failures.push_back(std::move(rule));
  return {};
}

Status parse_report(const Reader& r, const toml::table& t, const std::string& p, VllmRules& out) {
  ReportRule rule;
  FR_TRY(r.each(t, p, {"field", "after", "contains", "value", "ref"}, [&](const std::string& k, const toml::node& n, const std::string& key) -> Status {
    if (k == "field") {
      FR_ASSIGN(rule.field, r.string(n, key));
    } else if (k == "after") {
      FR_ASSIGN(rule.after, r.string(n, key));
    } else if (k == "contains") {
      FR_ASSIGN(rule.contains, r.string(n, key));
    } else if (k == "value") {
      FR_ASSIGN(rule.value, r.string(n, key));
    }
    return {};
  }));
  if (rule.field.empty()) return r.fail(t, p + "field", "required");
  if (rule.after.empty() == (rule.contains.empty() || rule.value.empty()))
    return r.fail(t, p + "after", "give either `after`, or `contains` with `value`");
  out.reports.push_back(std::move(rule));
  return {};
}

Status parse_report_default(const Reader& r, const toml::table& t, const std::string& p, VllmRules& out) {
  ReportDefault rule;
  FR_TRY(r.each(t, p, {"field", "since", "value"}, [&](const std::string& k, const toml::node& n, const std::string& key) -> Status {
    if (k == "field") {
      FR_ASSIGN(rule.field, r.string(n, key));
    } else if (k == "since") {
      FR_ASSIGN(rule.since, r.version(n, key));
    } else {
      FR_ASSIGN(rule.value, r.string(n, key));
    }
    return {};
  }));
  if (rule.field.empty() || rule.value.empty()) return r.fail(t, p + "field", "field, since and value are required");
  out.report_defaults.push_back(std::move(rule));
  return {};
}

Status parse_preload_refusal(const Reader& r, const toml::table& t, const std::string& p, VllmRules& out) {
  PreloadRefusal rule;
  FR_TRY(r.each(t, p, {"flag", "values", "mode", "why"}, [&](const std::string& k, const toml::node& n, const std::string& key) -> Status {
    if (k == "flag") {
      FR_ASSIGN(rule.flag, r.string(n, key));
      rule.flag = canonical_flag_name(rule.flag);
    } else if (k == "values") {
      FR_ASSIGN(rule.values, r.strings(n, key));
    } else if (k == "mode") {
      FR_ASSIGN(rule.mode, r.string(n, key));
    } else {
      FR_ASSIGN(rule.why, r.string(n, key));
    }
    return {};
  }));
  if (rule.flag.empty() || rule.why.empty()) return r.fail(t, p + "flag", "flag and why are required");
  out.preload_refuse.push_back(std::move(rule));
  return {};
}

}  // namespace

Result<VllmRules> parse_vllm_rules(std::string_view text, const std::string& path) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    return make_error(Errc::kInvalidArgument,
                      path + ":" + std::to_string(std::max<int64_t>(1, e.source().begin.line)) + ": TOML syntax: " + std::string(e.description()));
  }
  Reader r(path);
  VllmRules out;
  FR_TRY(r.each(root, "", {"newest", "daemon", "preload", "removed", "gated", "added", "failure", "report", "report_default"},
                [&](const std::string& k, const toml::node& n, const std::string& key) -> Status {
                  if (k == "newest") {
                    FR_ASSIGN(out.newest, r.version(n, key));
                  } else if (k == "daemon") {
                    auto t = n.as_table();
                    if (!t) return r.fail(n, key, "expected a table ([daemon])");
                    return r.each(*t, "daemon.", {"flags"}, [&](const std::string&, const toml::node& v, const std::string& kk) -> Status {
                      FR_ASSIGN(out.daemon_flags, r.flag_names(v, kk));
                      return {};
                    });
                  } else if (k == "preload") {
                    auto t = n.as_table();
                    if (!t) return r.fail(n, key, "expected a table ([preload])");
                    return r.each(*t, "preload.", {"pass", "since", "refuse"},
                                  [&](const std::string& pk, const toml::node& v, const std::string& kk) -> Status {
                                    if (pk == "pass") {
                                      FR_ASSIGN(out.preload_pass, r.flag_names(v, kk));
                                    } else if (pk == "since") {
                                      FR_ASSIGN(out.preload_since, r.version(v, kk));
                                    } else {
                                      return r.tables(v, kk, [&](const toml::table& t2, const std::string& p) {
                                        return parse_preload_refusal(r, t2, p, out);
                                      });
                                    }
                                    return {};
                                  });
                  } else if (k == "removed") {
                    return r.tables(n, key, [&](const toml::table& t, const std::string& p) { return parse_removed(r, t, p, out); });
                  } else if (k == "gated") {
                    return r.tables(n, key, [&](const toml::table& t, const std::string& p) { return parse_gated(r, t, p, out); });
                  } else if (k == "added") {
                    return r.tables(n, key, [&](const toml::table& t, const std::string& p) { return parse_added(r, t, p, out); });
                  } else if (k == "failure") {
                    return r.tables(n, key, [&](const toml::table& t, const std::string& p) { return parse_failure(r, t, p, out); });
                  } else if (k == "report") {
                    return r.tables(n, key, [&](const toml::table& t, const std::string& p) { return parse_report(r, t, p, out); });
                  } else {
                    return r.tables(n, key, [&](const toml::table& t, const std::string& p) { return parse_report_default(r, t, p, out); });
                  }
                  return {};
                }));
  return out;
}

const VllmRules& builtin_vllm_rules() {
  static const VllmRules rules = [] {
    auto r = parse_vllm_rules(kVllmRulesToml, "data/vllm.toml (built in)");
    if (!r.ok()) {
      // Only a broken edit of data/vllm.toml gets here; tests/supervisor/vllm_rules_test.cc catches it first.
      std::fprintf(stderr, "fastrestart: %s\n", r.error().message.c_str());
      std::abort();
    }
    return std::move(*r);
  }();
  return rules;
}

Result<VllmRules> load_vllm_rules(const std::string& extra_path) {
  VllmRules out = builtin_vllm_rules();
  if (extra_path.empty()) return out;
  FR_ASSIGN(std::string text, read_file(extra_path, 4 << 20));
  FR_ASSIGN(VllmRules extra, parse_vllm_rules(text, extra_path));
  if (extra.newest > out.newest) out.newest = extra.newest;
  auto append = [](auto& to, auto& from) { to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end())); };
  for (auto& f : extra.daemon_flags)
    if (std::find(out.daemon_flags.begin(), out.daemon_flags.end(), f) == out.daemon_flags.end()) out.daemon_flags.push_back(f);
  for (auto& f : extra.preload_pass)
    if (std::find(out.preload_pass.begin(), out.preload_pass.end(), f) == out.preload_pass.end()) out.preload_pass.push_back(f);
  append(out.preload_refuse, extra.preload_refuse);
  append(out.removed, extra.removed);
  append(out.gated, extra.gated);
  append(out.added, extra.added);
  // The operator's failure and report rules first: they are the more specific ones.
  extra.failures.insert(extra.failures.end(), out.failures.begin(), out.failures.end());
  out.failures = std::move(extra.failures);
  extra.reports.insert(extra.reports.end(), out.reports.begin(), out.reports.end());
  out.reports = std::move(extra.reports);
  append(out.report_defaults, extra.report_defaults);
  return out;
}

}  // namespace fr::supervisor
