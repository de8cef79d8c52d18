#include "common/parse_number.h"

#include <charconv>
#include <cmath>
#include <string>
#include <system_error>

namespace fr {
namespace {

// The whole of `text` as a T by std::from_chars (which takes no space and no '+'), or nullopt.
template <typename T, typename... Format>
std::optional<T> whole_number(std::string_view text, Format... format) {
  T v{};
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v, format...);
  if (text.empty() || ec != std::errc() || p != end) return std::nullopt;
  return v;
}

}  // namespace

std::optional<uint64_t> to_u64(std::string_view text) { return whole_number<uint64_t>(text); }

std::optional<int64_t> to_i64(std::string_view text) { return whole_number<int64_t>(text); }

std::optional<double> to_decimal(std::string_view text) {
  auto v = whole_number<double>(text, std::chars_format::fixed);
  if (!v || !std::isfinite(*v)) return std::nullopt;  // from_chars reads "inf" and "nan" in any format
  return v;
}

Result<uint64_t> parse_u64(std::string_view text, std::string_view what) {
  if (auto v = to_u64(text)) return *v;
  return make_error(Errc::kInvalidArgument,
                    std::string(what) + ": not an unsigned integer: \"" + std::string(text.substr(0, 32)) + "\"");
}

Error bad_env(std::string_view name, std::string_view value, std::string_view why) {
  return make_error(Errc::kInvalidArgument, std::string(name) + "=" + std::string(value) + ": " + std::string(why));
}

}  // namespace fr
