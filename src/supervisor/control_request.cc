#include "supervisor/control_request.h"

namespace fr::supervisor {

using nlohmann::json;

namespace {

constexpr size_t kMaxOp = 64;
constexpr size_t kMaxFlags = 4096;

Error bad(const std::string& field, const std::string& what) {
  return make_error(Errc::kInvalidArgument, field + ": " + what);
}

const char* type_name(const json& j) { return j.type_name(); }

}  // namespace

Result<ControlRequest> parse_control_request(const json& req) {
  if (!req.is_object()) return bad("request", std::string("expected an object, got ") + type_name(req));
  ControlRequest r;
  auto op = req.find("op");
  if (op == req.end()) return bad("op", "missing");
  if (!op->is_string()) return bad("op", std::string("expected a string, got ") + type_name(*op));
  r.op = op->get<std::string>();
  if (r.op.size() > kMaxOp) return bad("op", "longer than " + std::to_string(kMaxOp) + " bytes");

  if (auto f = req.find("flags"); f != req.end()) {
    std::vector<std::string> words;
    if (f->is_string()) {
      auto split = split_flags(f->get<std::string>());
      if (!split.ok()) return bad("flags", split.error().message);
      words = std::move(*split);
    } else if (f->is_array()) {
      for (size_t i = 0; i < f->size(); ++i) {
        const json& w = (*f)[i];
        if (!w.is_string()) return bad("flags[" + std::to_string(i) + "]", std::string("expected a string, got ") + type_name(w));
        words.push_back(w.get<std::string>());
      }
    } else {
      return bad("flags", std::string("expected a string or an array of strings, got ") + type_name(*f));
    }
    if (words.size() > kMaxFlags) return bad("flags", "more than " + std::to_string(kMaxFlags) + " words");
    auto flags = FlagList::from_words(std::move(words), "flags");
    if (!flags.ok()) return flags.error();  // "flags[i] ...: holds a control character ..."
    r.flags = std::move(*flags);
  }
  if (auto m = req.find("mode"); m != req.end()) {
    const std::string mode = m->is_string() ? m->get<std::string>() : std::string();
    if (mode == "replace") r.mode = PushKind::kReplace;
    else if (mode == "add") r.mode = PushKind::kAdd;
    else if (mode == "remove") r.mode = PushKind::kRemove;
    else return bad("mode", "expected \"replace\", \"add\" or \"remove\", got " + m->dump().substr(0, 64));
  }
  if (auto w = req.find("wait"); w != req.end()) {
    if (!w->is_boolean()) return bad("wait", std::string("expected a boolean, got ") + type_name(*w));
    r.wait = w->get<bool>();
  }
  return r;
}

json to_json(const ControlRequest& r) {
  json j{{"op", r.op},
         {"wait", r.wait},
         {"mode", r.mode == PushKind::kAdd ? "add" : r.mode == PushKind::kRemove ? "remove" : "replace"}};
  if (r.flags) j["flags"] = r.flags->words();
  return j;
}

}  // namespace fr::supervisor
