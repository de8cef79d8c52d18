#include "supervisor/engines/vllm/vllm_report.h"

#include "common/bounded_json.h"

namespace fr::supervisor {
namespace {

constexpr size_t kMaxLine = 4096;  // longer lines are tracebacks or dumps, never a report
constexpr size_t kMaxLoader = 16;
constexpr const char* kLoaderPrefix = "fastrestart-loader: v=";

// The word at `s[pos]`, up to a space or a comma.
std::string word_at(const std::string& s, size_t pos) {
  size_t end = pos;
  while (end < s.size() && s[end] != ' ' && s[end] != ',' && s[end] != '\t') ++end;
  return s.substr(pos, end - pos);
}

}  // namespace

std::string strip_ansi(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\033' && i + 1 < s.size() && s[i + 1] == '[') {
      i += 2;
      while (i < s.size() && !(s[i] >= '@' && s[i] <= '~')) ++i;  // parameters, then the final byte
      continue;
    }
    out += s[i];
  }
  return out;
}

std::optional<LoaderResult> parse_loader_line(const std::string& line) {
  size_t at = line.find(kLoaderPrefix);
  if (at == std::string::npos) return std::nullopt;
  std::string rest = line.substr(at + std::char_traits<char>::length("fastrestart-loader:"));
  size_t r = rest.find(" reason=");
  if (r == std::string::npos) return std::nullopt;
  LoaderResult out;
  std::string head = rest.substr(0, r);
  size_t i = 0;
  while (i < head.size()) {
    while (i < head.size() && head[i] == ' ') ++i;
    size_t end = head.find(' ', i);
    if (end == std::string::npos) end = head.size();
    std::string tok = head.substr(i, end - i);
    i = end;
    size_t eq = tok.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    out.fields[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  auto reason = parse_json_or_discarded(rest.substr(r + 8), kSmallJsonLimits);
  out.reason = !reason.is_discarded() && reason.is_string() ? reason.get<std::string>() : rest.substr(r + 8);
  // Format version 1 (docs/vllm-plugin.md, "The result line"): a version we do not know is not parsed.
  if (auto v = out.fields.find("v"); v == out.fields.end() || v->second != "1") return std::nullopt;
  out.fields.erase("v");
  auto res = out.fields.find("result");
  if (res == out.fields.end()) return std::nullopt;
  out.result = res->second;
  out.fields.erase(res);
  if (out.result != "hit" && out.result != "miss" && out.result != "fallback" && out.result != "fail") return std::nullopt;
  return out;
}

bool VllmReport::observe(const VllmRules& rules, const std::string& raw) {
  if (raw.size() > kMaxLine) return false;
  if (auto l = parse_loader_line(raw)) {
    loader.push_back(std::move(*l));
    if (loader.size() > kMaxLoader) loader.erase(loader.begin());
    return true;
  }
  const std::string line = strip_ansi(raw);
  bool any = false;
  for (const auto& r : rules.reports) {
    if (!r.after.empty()) {
      size_t at = line.find(r.after);
      if (at == std::string::npos) continue;
      std::string v = word_at(line, at + r.after.size());
      if (v.empty()) continue;
      fields[r.field] = {v, line};
      any = true;
    } else if (line.find(r.contains) != std::string::npos) {
      fields[r.field] = {r.value, line};
      any = true;
    }
  }
  return any;
}

void VllmReport::finish(const VllmRules& rules) {
  auto version = VllmVersion::parse(get("version"));
  for (const auto& d : rules.report_defaults) {
    if (fields.count(d.field) || !version || *version < d.since) continue;
    fields[d.field] = {d.value, ""};
  }
}

std::string VllmReport::get(const std::string& field) const {
  auto it = fields.find(field);
  return it == fields.end() ? std::string() : it->second.value;
}

nlohmann::json VllmReport::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, f] : fields) j[k] = {{"value", f.value}, {"line", f.line}};
  nlohmann::json l = nlohmann::json::array();
  for (const auto& r : loader) {
    nlohmann::json e{{"result", r.result}, {"reason", r.reason}};
    for (const auto& [k, v] : r.fields) e[k] = v;
    l.push_back(std::move(e));
  }
  j["loader"] = std::move(l);
  return j;
}

}  // namespace fr::supervisor
