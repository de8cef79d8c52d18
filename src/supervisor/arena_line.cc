#include "supervisor/arena_line.h"

#include <map>

#include "common/parse_number.h"
#include "protocol/arena.h"

namespace fr::supervisor {
namespace {

constexpr std::string_view kArenaMarker = "fastrestart-arena:";

Error arena_bad(const std::string& what) { return make_error(Errc::kInvalidArgument, "fastrestart-arena: " + what); }

bool arena_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// Reads the `key=value` words after the outcome; a quoted value may hold spaces. Values are kept as read
// (quotes removed, escapes resolved).
Result<std::map<std::string, std::string>> arena_read_pairs(std::string_view rest) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i < rest.size()) {
    while (i < rest.size() && arena_space(rest[i])) ++i;
    if (i == rest.size()) break;
    const size_t key_at = i;
    while (i < rest.size() && rest[i] != '=' && !arena_space(rest[i])) ++i;
    if (i == rest.size() || rest[i] != '=') return arena_bad("a word without '=': \"" + std::string(rest.substr(key_at, std::min<size_t>(i - key_at, 64))) + "\"");
    const std::string key(rest.substr(key_at, i - key_at));
    if (key.empty()) return arena_bad("a value without a key");
    ++i;  // '='
    std::string value;
    if (i < rest.size() && rest[i] == '"') {
      ++i;
      bool closed = false;
      while (i < rest.size()) {
        const char c = rest[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\\' && i < rest.size() && (rest[i] == '"' || rest[i] == '\\')) {
          value += rest[i++];
          continue;
        }
        value += c;
      }
      if (!closed) return arena_bad(key + ": unterminated quote");
      if (i < rest.size() && !arena_space(rest[i])) return arena_bad(key + ": text after the closing quote");
    } else {
      const size_t at = i;
      while (i < rest.size() && !arena_space(rest[i])) ++i;
      value = std::string(rest.substr(at, i - at));
    }
    if (!out.emplace(key, std::move(value)).second) return arena_bad(key + ": given twice");
  }
  return out;
}

}  // namespace

Result<std::optional<ArenaLine>> parse_arena_line(std::string_view line) {
  const size_t at = line.find(kArenaMarker);
  if (at == std::string_view::npos) return std::optional<ArenaLine>();
  if (line.size() > kMaxArenaLine) return arena_bad("line of " + std::to_string(line.size()) + " bytes, over " + std::to_string(kMaxArenaLine));
  if (line.find('\0') != std::string_view::npos) return arena_bad("line holds a NUL byte");
  std::string_view rest = line.substr(at + kArenaMarker.size());
  size_t i = 0;
  while (i < rest.size() && arena_space(rest[i])) ++i;
  size_t end = i;
  while (end < rest.size() && !arena_space(rest[end])) ++end;
  const std::string_view outcome = rest.substr(i, end - i);
  if (outcome != "leased" && outcome != "fallback")
    return arena_bad("outcome \"" + std::string(outcome.substr(0, 32)) + "\" is neither leased nor fallback");
  auto pairs = arena_read_pairs(rest.substr(end));
  if (!pairs.ok()) return pairs.error();
  auto get = [&](const char* k) -> const std::string* {
    auto it = pairs->find(k);
    return it == pairs->end() ? nullptr : &it->second;
  };
  ArenaLine a;
  a.outcome = std::string(outcome);
  if (outcome == "fallback") {
    const std::string* reason = get("reason");
    if (!reason || reason->empty()) return arena_bad("fallback: reason is missing or empty");
    a.reason = *reason;
    if (a.reason.size() > kMaxArenaReason) {
      a.reason.resize(kMaxArenaReason);
      // Cut on a UTF-8 character's start, so that the status stays valid JSON text.
      while (!a.reason.empty() && (static_cast<unsigned char>(a.reason.back()) & 0xC0) == 0x80) a.reason.pop_back();
      if (!a.reason.empty() && static_cast<unsigned char>(a.reason.back()) >= 0xC0) a.reason.pop_back();
      a.reason += "...";
    }
    return std::optional<ArenaLine>(std::move(a));
  }
  const std::string* name = get("name");
  if (!name || !proto::valid_arena_name(*name)) return arena_bad("leased: name: missing, or not 1-64 of A-Z a-z 0-9 _ . -");
  a.name = *name;
  for (auto [key, out] : {std::pair{"bytes", &a.bytes}, std::pair{"generation", &a.generation}}) {
    const std::string* v = get(key);
    auto n = v ? to_u64(*v) : std::nullopt;
    if (!n || *n == 0) return arena_bad(std::string("leased: ") + key + ": missing, or not an integer > 0");
    *out = *n;
  }
  for (auto [key, out] : {std::pair{"waited_s", &a.waited_s}, std::pair{"swap_s", &a.swap_s}}) {
    const std::string* v = get(key);
    auto s = v ? to_decimal(*v) : std::nullopt;
    if (!s || *s < 0) return arena_bad(std::string("leased: ") + key + ": missing, or not a decimal >= 0");
    *out = *s;
  }
  return std::optional<ArenaLine>(std::move(a));
}

}  // namespace fr::supervisor
