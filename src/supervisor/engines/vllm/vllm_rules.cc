// Reading data/vllm.toml (and an operator's file of the same form). Every key is checked: an unknown key or
// a wrong type is an error naming file:line and the key, as in config.cc.
#include "supervisor/engines/vllm/vllm_rules.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <type_traits>

#include "common/io.h"
#include "supervisor/classify.h"
#include "supervisor/flags.h"
#include "supervisor/vllm_rules_data.h"

namespace fr::supervisor {

namespace {

class Reader {
 public:
  explicit Reader(const std::string& path) : m_path(path) {}

  Error fail(const toml::node& n, const std::string& key, const std::string& what) const {
    int64_t line = std::max<int64_t>(1, n.source().begin.line);
    return make_error(Errc::kInvalidArgument, m_path + ":" + std::to_string(line) + ": " + key + ": " + what);
  }

  // Typed reads of one value; `key` is its full name ("removed[3].version") for the error.
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
  // Substrings to look for in a line: an empty one would match every line.
  Result<std::vector<std::string>> patterns(const toml::node& n, const std::string& key) const {
    FR_ASSIGN(auto v, strings(n, key));
    for (const auto& s : v)
      if (s.empty()) return fail(n, key, "an empty string matches every line");
    return v;
  }
  // A flag in any spelling, canonical (--a_b and --a-b are one flag); it must start with '-'.
  Result<std::string> flag_name(const toml::node& n, const std::string& key) const {
    FR_ASSIGN(std::string s, string(n, key));
    if (!s.starts_with("-")) return fail(n, key, "a flag starts with '-', got \"" + s + "\"");
    return canonical_flag_name(s);
  }
  // As flag_name without the '-' check ([[gated]] unless, [[preload.refuse]] flag never had it).
  Result<std::string> canonical_name(const toml::node& n, const std::string& key) const {
    FR_ASSIGN(std::string s, string(n, key));
    return canonical_flag_name(s);
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
  // An exit_cause_name().
  Result<std::string> cause(const toml::node& n, const std::string& key) const {
    FR_ASSIGN(std::string s, string(n, key));
    if (!exit_cause_from_name(s)) return fail(n, key, "unknown cause \"" + s + "\" (allowed: " + exit_cause_names() + ")");
    return s;
  }

  // Visits every key of `t` (its full name is `prefix` + key); `known` names the allowed ones.
  template <typename F>
  Status each(const toml::table& t, const std::string& prefix, const std::vector<std::string_view>& known, F&& f) const {
    for (auto&& [k, n] : t) {
      std::string name(k.str());
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        std::string allowed;
        for (auto x : known) allowed += (allowed.empty() ? "" : ", ") + std::string(x);
        return fail(n, prefix + name, "unknown key (allowed: " + allowed + ")");
      }
      FR_TRY(f(name, n, prefix + name));
    }
    return {};
  }
  // An array of tables ([[key]]): `f(table, "key[i].")` for each.
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

 private:
  std::string m_path;
};

// The entries of a [[section]] are read from a table of their keys (Field), so every section checks keys,
// types and required keys the same way, and its errors name file:line, section[index].key.

enum class Need { kOptional, kRequired };

template <typename T>
struct Field {
  std::string_view name;
  Need need = Need::kOptional;
  std::string_view why;  // said when a required key is missing: what it holds
  std::function<Status(const Reader&, const toml::node&, const std::string& key, T& entry)> read;
};

template <typename M>
using ReadFn = Result<M> (Reader::*)(const toml::node&, const std::string&) const;

// Key `name`, read by `read` into `entry.*member`. A required string or list must also not be empty.
template <typename T, typename M>
Field<T> field(std::string_view name, M T::*member, ReadFn<M> read, Need need = Need::kOptional,
               std::string_view why = {}) {
  return {name, need, why, [member, read, need](const Reader& r, const toml::node& n, const std::string& key,
                                                T& entry) -> Status {
            FR_ASSIGN(entry.*member, (r.*read)(n, key));
            if constexpr (requires { (entry.*member).empty(); }) {
              if (need == Need::kRequired && (entry.*member).empty()) return r.fail(n, key, "must not be empty");
            } else {
              (void)need;  // only strings and lists can be empty
            }
            return {};
          }};
}

// Key `name` must be a string that nothing reads (`ref` where no message shows it).
template <typename T>
Field<T> note(std::string_view name) {
  return {name, Need::kOptional, {}, [](const Reader& r, const toml::node& n, const std::string& key, T&) -> Status {
            FR_TRY(r.string(n, key));
            return {};
          }};
}

// What one entry needs beyond its keys (a choice between keys); `p` is "section[i].".
template <typename T>
using Check = Status (*)(const Reader& r, const toml::table& t, const std::string& p, const T& entry);

// Every entry of the [[section]] `n` (named `key`), read by `fields`, checked by `check`, appended to `out`.
template <typename T>
Status read_section(const Reader& r, const toml::node& n, const std::string& key, const std::vector<Field<T>>& fields,
                    std::vector<T>& out, std::type_identity_t<Check<T>> check = nullptr) {
  std::vector<std::string_view> names;
  for (const auto& f : fields) names.push_back(f.name);
  return r.tables(n, key, [&](const toml::table& t, const std::string& p) -> Status {
    T entry;
    std::vector<bool> seen(fields.size());
    FR_TRY(r.each(t, p, names, [&](const std::string& k, const toml::node& v, const std::string& full) -> Status {
      size_t i = static_cast<size_t>(std::find(names.begin(), names.end(), k) - names.begin());
      seen[i] = true;
      return fields[i].read(r, v, full, entry);
    }));
    for (size_t i = 0; i < fields.size(); ++i) {
      if (fields[i].need != Need::kRequired || seen[i]) continue;
      std::string why = fields[i].why.empty() ? "" : ": " + std::string(fields[i].why);
      return r.fail(t, p + std::string(fields[i].name), "required" + why);
    }
    if (check) FR_TRY(check(r, t, p, entry));
    out.push_back(std::move(entry));
    return {};
  });
}

// ---- The sections (data/vllm.toml documents each key) ----

// `fields`, then the keys a rule about flags ends with: how bad a hit is, what changed, what to use instead,
// and where it is written (RemovedRule and GatedRule).
template <typename T>
std::vector<Field<T>> with_advice(std::vector<Field<T>> fields) {
  for (auto&& f : {field("severity", &T::severity, &Reader::severity), field("what", &T::what, &Reader::string),
                   field("use", &T::use, &Reader::string), field("ref", &T::ref, &Reader::string)})
    fields.push_back(f);
  return fields;
}

const std::vector<Field<RemovedRule>>& removed_fields() {
  using R = RemovedRule;
  static const std::vector<Field<R>> f = with_advice<R>({
      field("flag", &R::flag, &Reader::flag_name),
      field("env", &R::env, &Reader::string),
      field("command", &R::command, &Reader::string),
      field("value", &R::value, &Reader::string),
      field("value_contains", &R::value_contains, &Reader::string),
      field("version", &R::version, &Reader::version, Need::kRequired, "the vLLM release that removed or changed it"),
  });
  return f;
}

Status check_removed(const Reader& r, const toml::table& t, const std::string& p, const RemovedRule& rule) {
  int subjects = !rule.flag.empty() + !rule.env.empty() + !rule.command.empty();
  if (subjects != 1) return r.fail(t, p + "flag", "exactly one of flag, env, command is required");
  return {};
}

const std::vector<Field<GatedRule>>& gated_fields() {
  using G = GatedRule;
  static const std::vector<Field<G>> f = with_advice<G>({
      field("when_any", &G::when_any, &Reader::flag_names, Need::kRequired, "the flags that need `unless`"),
      field("unless", &G::unless, &Reader::canonical_name, Need::kRequired, "the flag they need"),
      field("version", &G::version, &Reader::version, Need::kRequired, "the vLLM release from which they need it"),
  });
  return f;
}

const std::vector<Field<AddedRule>>& added_fields() {
  using A = AddedRule;
  static const std::vector<Field<A>> f = {
      field("flags", &A::flags, &Reader::flag_names, Need::kRequired, "the flags the release added"),
      field("version", &A::version, &Reader::version, Need::kRequired, "the vLLM release that added them"),
  };
  return f;
}

const std::vector<Field<FailureRule>>& failure_fields() {
  using F = FailureRule;
  static const std::vector<Field<F>> f = {
      field("contains", &F::contains, &Reader::patterns, Need::kRequired, "the strings the line holds"),
      field("cause", &F::cause, &Reader::cause, Need::kRequired, "the exit cause the line means"),
      note<F>("ref"),
  };
  return f;
}

const std::vector<Field<ReportRule>>& report_fields() {
  using R = ReportRule;
  static const std::vector<Field<R>> f = {
      field("field", &R::field, &Reader::string, Need::kRequired),
      field("after", &R::after, &Reader::string),
      field("contains", &R::contains, &Reader::string),
      field("value", &R::value, &Reader::string),
      note<R>("ref"),
  };
  return f;
}

Status check_report(const Reader& r, const toml::table& t, const std::string& p, const ReportRule& rule) {
  if (rule.after.empty() == (rule.contains.empty() || rule.value.empty()))
    return r.fail(t, p + "after", "give either `after`, or `contains` with `value`");
  return {};
}

const std::vector<Field<ProgressPattern>>& progress_fields() {
  using P = ProgressPattern;
  static const std::vector<Field<P>> f = {
      field("contains", &P::contains, &Reader::string, Need::kRequired, "what marks the line"),
      field("after", &P::after, &Reader::string, Need::kRequired, "the text before the \"done/total\" word"),
      field("phase", &P::phase, &Reader::string, Need::kRequired, "the phase shown in status"),
      field("unit", &P::unit, &Reader::string),
      note<P>("ref"),
  };
  return f;
}

const std::vector<Field<ReportDefault>>& report_default_fields() {
  using D = ReportDefault;
  static const std::vector<Field<D>> f = {
      field("field", &D::field, &Reader::string, Need::kRequired),
      field("since", &D::since, &Reader::version),  // absent: every version
      field("value", &D::value, &Reader::string, Need::kRequired),
  };
  return f;
}

const std::vector<Field<PreloadRefusal>>& preload_refusal_fields() {
  using P = PreloadRefusal;
  static const std::vector<Field<P>> f = {
      field("flag", &P::flag, &Reader::canonical_name, Need::kRequired),
      field("values", &P::values, &Reader::strings),
      field("allow", &P::allow, &Reader::strings),
      field("allow_prefix", &P::allow_prefix, &Reader::strings),
      field("mode", &P::mode, &Reader::string),
      field("why", &P::why, &Reader::string, Need::kRequired),
  };
  return f;
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
  FR_TRY(r.each(root, "", {"newest", "daemon", "preload", "removed", "gated", "added", "failure", "report", "report_default", "progress"},
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
                    return r.each(*t, "preload.", {"pass", "since", "refuse", "quantization", "extra_config_keys"},
                                  [&](const std::string& pk, const toml::node& v, const std::string& kk) -> Status {
                                    if (pk == "pass") {
                                      FR_ASSIGN(out.preload_pass, r.flag_names(v, kk));
                                    } else if (pk == "since") {
                                      FR_ASSIGN(out.preload_since, r.version(v, kk));
                                    } else if (pk == "extra_config_keys") {
                                      FR_ASSIGN(out.preload_extra_config_keys, r.strings(v, kk));
                                    } else if (pk == "quantization") {
                                      auto q = v.as_table();
                                      if (!q) return r.fail(v, kk, "expected a table ([preload.quantization])");
                                      auto& pq = out.preload_quantization;
                                      return r.each(*q, kk + ".", {"allow", "checkpoint_allow", "except_architectures", "why"},
                                                    [&](const std::string& qk, const toml::node& qv, const std::string& qkk) -> Status {
                                                      if (qk == "why") {
                                                        FR_ASSIGN(pq.why, r.string(qv, qkk));
                                                      } else if (qk == "allow") {
                                                        FR_ASSIGN(pq.allow, r.strings(qv, qkk));
                                                      } else if (qk == "except_architectures") {
                                                        FR_ASSIGN(pq.except_architectures, r.strings(qv, qkk));
                                                      } else {
                                                        FR_ASSIGN(pq.checkpoint_allow, r.strings(qv, qkk));
                                                      }
                                                      return {};
                                                    });
                                    } else {
                                      return read_section(r, v, kk, preload_refusal_fields(), out.preload_refuse);
                                    }
                                    return {};
                                  });
                  } else if (k == "removed") {
                    return read_section(r, n, key, removed_fields(), out.removed, check_removed);
                  } else if (k == "gated") {
                    return read_section(r, n, key, gated_fields(), out.gated);
                  } else if (k == "added") {
                    return read_section(r, n, key, added_fields(), out.added);
                  } else if (k == "failure") {
                    return read_section(r, n, key, failure_fields(), out.failures);
                  } else if (k == "report") {
                    return read_section(r, n, key, report_fields(), out.reports, check_report);
                  } else if (k == "progress") {
                    return read_section(r, n, key, progress_fields(), out.progress);
                  } else {
                    return read_section(r, n, key, report_default_fields(), out.report_defaults);
                  }
                  return {};
                }));
  return out;
}

const VllmRules& builtin_vllm_rules() {
  static const VllmRules rules = [] {
    auto r = parse_vllm_rules(kVllmRulesToml, "data/vllm.toml (built in)");
    if (!r.ok()) {
      // Only a broken edit of data/vllm.toml gets here; tests/supervisor/engines/vllm/vllm_rules_test.cc catches it first.
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
  // An operator's file widens the allowlists (a method verified with ipc_cache after this release).
  append(out.preload_quantization.allow, extra.preload_quantization.allow);
  append(out.preload_quantization.checkpoint_allow, extra.preload_quantization.checkpoint_allow);
  append(out.preload_extra_config_keys, extra.preload_extra_config_keys);
  append(out.removed, extra.removed);
  append(out.gated, extra.gated);
  append(out.added, extra.added);
  // The operator's failure and report rules first: they are the more specific ones.
  extra.failures.insert(extra.failures.end(), out.failures.begin(), out.failures.end());
  out.failures = std::move(extra.failures);
  extra.reports.insert(extra.reports.end(), out.reports.begin(), out.reports.end());
  out.reports = std::move(extra.reports);
  append(out.report_defaults, extra.report_defaults);
  append(out.progress, extra.progress);
  return out;
}

}  // namespace fr::supervisor
