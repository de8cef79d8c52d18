#include "common/bounded_json.h"

#include <string>

namespace fr {

Status check_json_bounds(std::string_view text, const JsonLimits& limits) {
  size_t depth = 0, items = 0;
  bool in_string = false, escaped = false, in_token = false;
  auto too_many = [&] {
    return make_error(Errc::kProtocol, std::string(limits.what) + " holds more than " + std::to_string(limits.max_items) + " values");
  };
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        in_token = false;
        if (++items > limits.max_items) return too_many();
        break;
      case '[':
      case '{':
        in_token = false;
        if (++depth > limits.max_depth)
          return make_error(Errc::kProtocol, std::string(limits.what) + " nests deeper than " + std::to_string(limits.max_depth) + " levels");
        if (++items > limits.max_items) return too_many();
        break;
      case ']':
      case '}':
        in_token = false;
        if (depth > 0) --depth;
        break;
      case ',':
      case ':':
      case ' ':
      case '\t':
      case '\n':
      case '\r':
        in_token = false;
        break;
      default:  // a number or a literal: one value per run of such characters
        if (!in_token) {
          in_token = true;
          if (++items > limits.max_items) return too_many();
        }
    }
  }
  return {};
}

Result<nlohmann::json> parse_json_bounded(std::string_view text, const JsonLimits& limits) {
  FR_TRY(check_json_bounds(text, limits));
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(Errc::kProtocol, std::string(limits.what) + " is not valid JSON");
  return j;
}

nlohmann::json parse_json_or_discarded(std::string_view text, const JsonLimits& limits) {
  if (!check_json_bounds(text, limits).ok()) return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace fr
