#include "supervisor/engines/check.h"

#include "supervisor/control_request.h"
#include "supervisor/flags.h"

namespace fr::supervisor {

using nlohmann::json;

Result<FlagList> pushed_flags(const json& req, const FlagList& current, const std::string& op) {
  // One reading of {flags, mode} for every caller: the control request's own (control_request.h).
  json r = req.is_object() ? req : json::object();
  r["op"] = op;
  auto parsed = parse_control_request(r);
  if (!parsed.ok()) return make_error(Errc::kInvalidArgument, op + "." + parsed.error().message);
  return pushed_flags(*parsed, current);
}

FlagList pushed_flags(const ControlRequest& req, const FlagList& current) {
  if (!req.flags) return current;
  return current.merged(*req.flags, req.mode);
}

json check_reply(const CheckInput& in, const FlagList& next, bool with_would) {
  const Config& c = in.config;
  const FlagCheck check = in.kind.check_flags(c, next, in.own_environment);
  json findings = json::array();
  for (const auto& f : check.findings)
    findings.push_back({{"severity", f.error ? "error" : "warning"}, {"subject", f.subject}, {"message", f.message}});
  auto affecting = daemon_affecting_changes(in.kind.flag_rules(), in.current, next);
  json r{{"ok", true},
         {"kind", engine_kind_name(c.engine.kind)},
         {"flags", next.words()},
         {"checked_against", check.checked_against},
         {"findings", findings},
         {"daemon_affecting", affecting}};
  if (with_would)
    r["would"] = check.has_errors() ? "refuse" : next == in.current ? "nothing" : affecting.empty() ? "restart the engine (warm)" : "reload the daemons (cold)";
  return r;
}

}  // namespace fr::supervisor
