// A custom mutation for the JSON-reading fuzz targets: the inputs of docs/reliability.md, "Limits on what a
// peer sends", that byte-level mutation almost never builds (thousands of '[' in a row, a payload of tiny
// values, brackets inside strings, limits passed by one). One mutation in eight is one of these, around a
// prefix of the current input; the rest are libFuzzer's own.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace fr::fuzz {

// The attack number `kind` (0..5), `n` its size knob, `inner` an arbitrary string it wraps.
inline std::string json_attack(unsigned kind, size_t n, const std::string& inner) {
  std::string quoted = "\"";
  for (char c : inner) quoted += (c == '"' || c == '\\') ? '_' : c;
  quoted += '"';
  switch (kind % 6) {
    case 0:  // arrays nested n deep around the inner string: the value that overflowed the stack
      return "{\"op\":\"status\",\"id\":" + std::string(n, '[') + quoted + std::string(n, ']') + "}";
    case 1: {  // objects nested n deep
      std::string s;
      for (size_t i = 0; i < n; ++i) s += "{\"a\":";
      s += quoted;
      s.append(n, '}');
      return "{\"op\":\"status\",\"id\":" + s + "}";
    }
    case 2: {  // n tiny values: the twentyfold growth in memory
      std::string s = "{\"op\":\"status\",\"id\":[0";
      for (size_t i = 1; i < n; ++i) s += ",0";
      return s + "]}";
    }
    case 3:  // brackets and escapes inside a string: must not count
      return "{\"op\":\"status\",\"id\":\"" + std::string(n, '[') + "\\\\\\\"" + std::string(n, '{') + "\"}";
    case 4:  // exactly at the depth limit, then one past it
      return "{\"op\":\"status\",\"id\":" + std::string(31 + n % 3, '[') + std::string(31 + n % 3, ']') + "}";
    default:  // nesting left unclosed: invalid, however deep
      return "{\"op\":\"status\",\"id\":" + std::string(n, '[');
  }
}

// LLVMFuzzerCustomMutator's body. The first `keep` bytes (a target's own header byte) stay as they are.
inline size_t mutate_with_json_attacks(uint8_t* data, size_t size, size_t max_size, unsigned seed, size_t keep = 0) {
  if (seed % 8 != 0 || max_size < 64 + keep || size < keep) return LLVMFuzzerMutate(data, size, max_size);
  const size_t room = max_size - keep;
  const std::string inner(reinterpret_cast<const char*>(data + keep), std::min<size_t>(size - keep, 16));
  // The size knob is spread evenly over the powers of two up to half the room (then evenly within one),
  // not evenly over the room: the depth limit sits at 32, and an even spread over 1..32768 made the typical
  // attack tens of kilobytes, each costing as much to parse as a hundred small inputs. A large one still
  // comes one attack in a few.
  const size_t top = std::max<size_t>(room / 2, 1);
  const unsigned bits = 1 + (seed >> 6) % static_cast<unsigned>(std::bit_width(top));
  const size_t n = 1 + (size_t{seed >> 11} * 2654435761u) % std::min<size_t>(top, size_t{1} << bits);
  std::string out = json_attack((seed >> 3) % 6, n, inner);
  if (out.size() > room) out.resize(room);
  std::memcpy(data + keep, out.data(), out.size());
  return keep + out.size();
}

// The nesting depth of a parsed value (an accepted one is at most 32 deep, so the recursion is bounded).
template <class Json>
size_t json_depth(const Json& j) {
  size_t d = 0;
  if (j.is_array() || j.is_object())
    for (const auto& v : j) d = std::max(d, json_depth(v));
  return (j.is_array() || j.is_object()) ? d + 1 : 0;
}

}  // namespace fr::fuzz
