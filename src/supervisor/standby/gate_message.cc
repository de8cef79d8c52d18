#include "supervisor/standby/gate_message.h"

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "common/control_chars.h"

namespace fr::supervisor {
namespace {

Error bad(std::string_view line, const std::string& what) {
  std::string shown(line.substr(0, 200));
  if (line.size() > 200) shown += "...";
  return make_error(Errc::kProtocol, "gate message '" + escape_control_chars(shown) + "': " + what);
}

}  // namespace

Result<ParkedMessage> parse_gate_message(std::string_view line) {
  if (line.size() + 1 > kMaxGateLine)
    return bad(line, "longer than " + std::to_string(kMaxGateLine) + " bytes with its newline");
  auto parsed = parse_json_bounded(line, {32, 4096, "it"});
  if (!parsed.ok()) return bad(line, parsed.error().message.ends_with("not valid JSON") ? "not JSON" : parsed.error().message);
  const nlohmann::json j = std::move(*parsed);
  if (!j.is_object()) return bad(line, "not a JSON object");
  auto op = j.find("op");
  if (op == j.end() || !op->is_string()) return bad(line, "no \"op\" string");
  if (*op != "parked")
    return bad(line, "unknown op \"" + escape_control_chars(op->get<std::string>()) + "\" (an engine sends only \"parked\")");
  auto v = j.find("v");
  if (v == j.end() || !v->is_number_integer()) return bad(line, "no protocol version \"v\" (an integer)");
  if (v->get<int64_t>() != kGateVersion)
    return bad(line, "protocol version " + std::to_string(v->get<int64_t>()) + ", this fastrestartd speaks " +
                         std::to_string(kGateVersion));
  ParkedMessage m;
  auto level = j.find("level");
  if (level == j.end() || !level->is_string()) return bad(line, "no \"level\" string");
  m.level = level->get<std::string>();
  if (m.level != "pre_gpu" && m.level != "warmed") return bad(line, "level must be \"pre_gpu\" or \"warmed\"");
  auto pid = j.find("pid");
  if (pid == j.end() || !pid->is_number_integer() || pid->get<int64_t>() <= 0 || pid->get<int64_t>() > INT32_MAX)
    return bad(line, "no \"pid\" (a positive integer)");
  m.pid = static_cast<pid_t>(pid->get<int64_t>());
  return m;
}

std::string gate_release_line() { return "{\"op\":\"release\"}\n"; }
std::string gate_exit_line() { return "{\"op\":\"exit\"}\n"; }

}  // namespace fr::supervisor
