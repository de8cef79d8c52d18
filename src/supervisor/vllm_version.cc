#include "supervisor/vllm_version.h"

#include <cctype>

namespace fr::supervisor {

std::optional<VllmVersion> VllmVersion::parse(std::string_view s) {
  if (s.starts_with('v')) s.remove_prefix(1);
  VllmVersion v;
  size_t i = 0, part = 0;
  bool any = false;
  while (part < 3) {
    if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) break;
    int n = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      n = n * 10 + (s[i] - '0');
      if (n > 1000000) return std::nullopt;
      ++i;
    }
    v.parts[part++] = n;
    any = true;
    if (i < s.size() && s[i] == '.') ++i;
    else break;
  }
  if (!any || part < 2) return std::nullopt;  // "0.31" at least
  return v;
}

std::string VllmVersion::str() const {
  return std::to_string(parts[0]) + "." + std::to_string(parts[1]) + "." + std::to_string(parts[2]);
}

}  // namespace fr::supervisor
