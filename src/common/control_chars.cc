#include "common/control_chars.h"

#include <cstdio>

namespace fr {

std::optional<size_t> find_control_char(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i)
    if (is_control_char(s[i])) return i;
  return std::nullopt;
}

std::string control_char_name(char c) {
  switch (c) {
    case '\0': return "\\0";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
  }
  char b[8];
  std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
  return b;
}

std::string escape_control_chars(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (is_control_char(c)) out += control_char_name(c);
    else out += c;
  }
  return out;
}

}  // namespace fr
