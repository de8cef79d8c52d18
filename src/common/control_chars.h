// Raw control characters in text that came from outside (pushed flags, an engine's output, a peer's
// request): found, to refuse them, and escaped, to log them. A logged "\n" or "\r" would otherwise forge a
// log line of its own, and a NUL cuts a C string (an exec argument) short without a word.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace fr {

// True for the C0 controls (0x00-0x1f) and DEL (0x7f). Bytes >= 0x80 (UTF-8) are text.
inline bool is_control_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}

// The offset of the first control character of `s`, or nullopt.
std::optional<size_t> find_control_char(std::string_view s);

// The name of a control character as it would be escaped: "\n", "\0", "\x1b".
std::string control_char_name(char c);

// `s` with every control character written as its escape (control_char_name), for a log line: it stays
// one line and carries no terminal escapes. Backslashes are kept as they are (readable paths and JSON),
// so "\n" in the output may also be the two characters themselves.
std::string escape_control_chars(std::string_view s);

}  // namespace fr
