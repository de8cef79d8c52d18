// Numbers in text from outside: a `key=value` word of an engine's output line, an environment variable.
// The whole text is the number: no sign where none is allowed, no '+', no space before or after, nothing
// after the digits, and a value that fits its type. std::from_chars rules, because strtoull and friends
// skip leading space, accept '+' and (strtoull) wrap a '-' round to a huge value, and stoull throws.
// Callers that phrase their own error ("missing, or not an integer > 0") use the to_* forms; the parse_*
// forms return an Error (kInvalidArgument) that names the field or variable at fault.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

#include "common/result.h"

namespace fr {

// Decimal digits only, within 0 to 2^64 - 1. "", "-1", "+1", " 1", "1 ", "1x" and "18446744073709551616" are not.
std::optional<uint64_t> to_u64(std::string_view text);

// An optional '-' then decimal digits, within int64_t. "+1", " 1" and "1 " are not.
std::optional<int64_t> to_i64(std::string_view text);

// A fixed-point decimal: an optional '-', digits, an optional '.' and digits ("2", "0.25", ".5", "-1.5"),
// finite. No exponent ("1e3"), no hex, no "inf" or "nan", no space.
std::optional<double> to_decimal(std::string_view text);

// to_u64, or the error `<what>: not an unsigned integer: "<text>"` (the text cut to its first 32 bytes, so
// a long line does not make a long error). E.g. `hit_tokens: not an unsigned integer: "many"`.
Result<uint64_t> parse_u64(std::string_view text, std::string_view what);

// The error for an environment variable's bad value: `<name>=<value>: <why>`, e.g.
// `LISTEN_FDS=x: not a descriptor count`.
Error bad_env(std::string_view name, std::string_view value, std::string_view why);

// The integer (to_i64) that environment variable `name` holds as `value`, when within [lo, hi]; otherwise
// bad_env(name, value, why): a value that is not a number and one out of range read the same. Int is named
// by the caller (`parse_env_int<int>(..., 0, INT_MAX, ...)`), and [lo, hi] must lie within it.
template <typename Int>
Result<Int> parse_env_int(std::string_view name, std::string_view value, std::type_identity_t<Int> lo,
                          std::type_identity_t<Int> hi, std::string_view why) {
  static_assert(std::is_signed_v<Int> && sizeof(Int) <= sizeof(int64_t));
  const auto v = to_i64(value);
  if (!v || *v < lo || *v > hi) return bad_env(name, value, why);
  return static_cast<Int>(*v);
}

}  // namespace fr
