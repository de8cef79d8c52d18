#include "supervisor/engines/vllm/vllm_check.h"

#include "supervisor/control_request.h"
#include "supervisor/flags.h"
#include "supervisor/engines/vllm/vllm_lint.h"

namespace fr::supervisor {

using nlohmann::json;

Result<std::vector<std::string>> pushed_flags(const json& req, const std::vector<std::string>& current,
                                              const std::string& op) {
  // One reading of {flags, mode} for every caller: the control request's own (control_request.h).
  json r = req.is_object() ? req : json::object();
  r["op"] = op;
  auto parsed = parse_control_request(r);
  if (!parsed.ok()) return make_error(Errc::kInvalidArgument, op + "." + parsed.error().message);
  if (!parsed->flags) return current;
  return merge_flags(current, *parsed->flags, parsed->mode);
}

json check_reply(const CheckInput& in, const std::vector<std::string>& next, bool with_would) {
  const Config& c = in.config;
  json findings = json::array(), target = nullptr;
  bool errors = false;
  if (c.engine.kind == EngineKind::kVllm) {
    LintTarget t = lint_target(in.rules, in.reported_version, c.engine.vllm_version);
    target = {{"version", t.version.str()}, {"source", t.source}};
    LintInput li{c.engine.command, next, c.engine.env, in.inherited, c.weights.daemon, c.weights.mode, {}};
    if (c.weights.daemon == DaemonKind::kVllmPreload) li.checkpoint = read_checkpoint_facts(next);
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
