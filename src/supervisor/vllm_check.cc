#include "supervisor/vllm_check.h"

#include "supervisor/flags.h"
#include "supervisor/vllm_lint.h"

namespace fr::supervisor {

using nlohmann::json;

Result<std::vector<std::string>> pushed_flags(const json& req, const std::vector<std::string>& current,
                                              const std::string& op) {
  if (!req.contains("flags")) return current;
  std::vector<std::string> words;
  const json& f = req["flags"];
  if (f.is_array()) {
    for (size_t i = 0; i < f.size(); ++i) {
      if (!f[i].is_string())
        return make_error(Errc::kInvalidArgument, op + ".flags[" + std::to_string(i) + "]: not a string");
      words.push_back(f[i].get<std::string>());
    }
  } else if (f.is_string()) {
    auto split = split_flags(f.get<std::string>());
    if (!split.ok()) return make_error(Errc::kInvalidArgument, op + ".flags: " + split.error().message);
    words = std::move(*split);
  } else {
    return make_error(Errc::kInvalidArgument, op + ".flags: not a string or an array of strings");
  }
  const json m = req.value("mode", json("replace"));
  const std::string mode = m.is_string() ? m.get<std::string>() : std::string("(not a string)");
  PushKind kind;
  if (mode == "replace") kind = PushKind::kReplace;
  else if (mode == "add") kind = PushKind::kAdd;
  else if (mode == "remove") kind = PushKind::kRemove;
  else return make_error(Errc::kInvalidArgument, op + ".mode: " + mode.substr(0, 64) + " (replace, add or remove)");
  return merge_flags(current, words, kind);
}

json check_reply(const CheckInput& in, const std::vector<std::string>& next, bool with_would) {
  const Config& c = in.config;
  json findings = json::array(), target = nullptr;
  bool errors = false;
  if (c.engine.kind == EngineKind::kVllm) {
    LintTarget t = lint_target(in.rules, in.reported_version, c.engine.vllm_version);
    target = {{"version", t.version.str()}, {"source", t.source}};
    LintInput li{c.engine.command, next, c.engine.env, in.inherited, c.weights.daemon, c.weights.mode};
    auto found = lint_vllm(in.rules, t, li);
    errors = has_errors(found);
    for (const auto& f : found)
      findings.push_back({{"severity", f.severity == Severity::kError ? "error" : "warning"}, {"subject", f.subject},
                          {"message", f.message}});
  }
  auto affecting = daemon_affecting_changes(c.engine.kind, in.current, next, in.rules.daemon_flags);
  json r{{"ok", true},
         {"kind", engine_kind_name(c.engine.kind)},
         {"flags", next},
         {"checked_against", target},
         {"findings", findings},
         {"daemon_affecting", affecting}};
  if (with_would)
    r["would"] = errors ? "refuse" : next == in.current ? "nothing" : affecting.empty() ? "restart the engine (warm)" : "reload the daemons (cold)";
  return r;
}

}  // namespace fr::supervisor
