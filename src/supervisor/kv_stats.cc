#include "supervisor/kv_stats.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <map>

#include <deque>
#include <mutex>

#include <spdlog/spdlog.h>

#include "common/control_chars.h"
#include "common/fd.h"
#include "common/parse_number.h"

namespace fr::supervisor {
namespace {

constexpr std::string_view kKvMarker = "fastrestart-kv:";

Error kv_bad(const std::string& what) { return make_error(Errc::kInvalidArgument, what); }

constexpr std::string_view kKvSpaces = " \t\r\n";  // between words

bool kv_word(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  return true;
}

bool kv_hex_id(std::string_view s) {
  if (s.empty() || s.size() > 32) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

Result<std::optional<KvStatsRecord>> parse_kv_stats(std::string_view text) {
  const size_t at = text.find(kKvMarker);
  if (at == std::string_view::npos) return std::optional<KvStatsRecord>();
  if (text.size() > kMaxKvStatsText)
    return kv_bad("text of " + std::to_string(text.size()) + " bytes, over " + std::to_string(kMaxKvStatsText));
  std::string_view rest = text.substr(at + kKvMarker.size());
  std::map<std::string, std::string_view> words;
  for (size_t from = rest.find_first_not_of(kKvSpaces); from != std::string_view::npos;
       from = rest.find_first_not_of(kKvSpaces, from)) {
    const size_t end = std::min(rest.find_first_of(kKvSpaces, from), rest.size());
    const std::string_view w = rest.substr(from, end - from);
    from = end;
    const size_t eq = w.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return kv_bad("a word that is not key=value: \"" + std::string(w.substr(0, 64)) + "\"");
    const std::string key(w.substr(0, eq));
    if (!words.emplace(key, w.substr(eq + 1)).second) return kv_bad(key + ": given twice");
  }
  KvStatsRecord r;
  auto word = [&](const char* key, std::string& out) -> Status {
    auto it = words.find(key);
    if (it == words.end()) return kv_bad(std::string(key) + ": missing");
    if (!kv_word(it->second)) return kv_bad(std::string(key) + ": not a word of 1-64 of A-Z a-z 0-9 _ -");
    out = std::string(it->second);
    return {};
  };
  auto count = [&](const std::string& key, uint64_t& out) -> Status {
    auto it = words.find(key);
    if (it == words.end()) return kv_bad(key + ": missing");
    FR_ASSIGN(out, parse_u64(it->second, key));
    return {};
  };
  auto id = words.find("id");
  if (id == words.end() || !kv_hex_id(id->second)) return kv_bad("id: missing, or not 1-32 of 0-9 a-f");
  r.id = std::string(id->second);
  status::KvCacheStatus& k = r.kv;
  for (auto [key, out] : {std::pair{"location", &k.location}, std::pair{"header", &k.header}}) FR_TRY(word(key, *out));
  for (auto [key, out] : {std::pair{"blocks", &k.blocks}, std::pair{"block_tokens", &k.block_tokens},
                          std::pair{"recovered", &k.recovered}, std::pair{"requests", &k.requests},
                          std::pair{"query_tokens", &k.query_tokens}, std::pair{"hit_tokens", &k.hit_tokens}})
    FR_TRY(count(key, *out));
  if (k.hit_tokens > k.query_tokens)
    return kv_bad("hit_tokens: " + std::to_string(k.hit_tokens) + " is more than query_tokens " + std::to_string(k.query_tokens));
  for (const auto& [key, value] : words) {
    if (key.rfind("dropped.", 0) != 0) continue;
    const std::string reason = key.substr(8);
    if (!kv_word(reason)) return kv_bad(key + ": the reason is not a word of 1-64 of A-Z a-z 0-9 _ -");
    if (k.dropped_by.size() == kMaxKvReasons) return kv_bad(key + ": more than " + std::to_string(kMaxKvReasons) + " reasons");
    FR_TRY(count(key, k.dropped_by[reason]));
  }
  return std::optional<KvStatsRecord>(std::move(r));
}

Result<KvStatsRecord> read_kv_stats_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) {
    const int err = errno;
    return make_error(err == ENOENT ? Errc::kNotFound : Errc::kIo, path + ": " + sys_error("open", err).message);
  }
  std::string text(kMaxKvStatsText + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(Errc::kIo, path + ": " + sys_error("read").message);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > kMaxKvStatsText) return make_error(Errc::kInvalidArgument, path + ": over " + std::to_string(kMaxKvStatsText) + " bytes");
  text.resize(got);
  auto parsed = parse_kv_stats(text);
  if (!parsed.ok()) return make_error(Errc::kInvalidArgument, path + ": " + parsed.error().message);
  if (!*parsed) return make_error(Errc::kInvalidArgument, path + ": no fastrestart-kv: text");
  return std::move(**parsed);
}

std::string kv_cache_text(const status::KvCacheStatus& k) {
  std::string t = "pid " + std::to_string(k.pid) + " " + k.location + ", " + std::to_string(k.blocks) + " blocks of " +
                  std::to_string(k.block_tokens) + " tokens, header " + k.header + ": " + std::to_string(k.recovered) +
                  " recovered, " + std::to_string(k.dropped()) + " dropped";
  std::string reasons;
  for (const auto& [reason, n] : k.dropped_by) reasons += (reasons.empty() ? " (" : ", ") + reason + " " + std::to_string(n);
  if (!reasons.empty()) t += reasons + ")";
  t += "; prefix hits " + std::to_string(k.hit_tokens) + " of " + std::to_string(k.query_tokens) + " tokens";
  if (auto r = k.hit_rate()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " (%.1f%%)", *r * 100);
    t += buf;
  }
  t += " in " + std::to_string(k.requests) + " requests";
  if (!k.error.empty()) t += "; counters file: " + k.error;
  return t;
}

status::KvCacheStatus kv_cache_with_file(const KvStatsRecord& line, const std::string& path) {
  status::KvCacheStatus k = line.kv;
  k.counters = "line";
  if (path.empty()) return k;
  auto file = read_kv_stats_file(path);
  if (!file.ok()) {
    if (file.error().code != Errc::kNotFound) k.error = file.error().message;
    return k;
  }
  if (file->id != line.id) return k;  // a previous engine's file: this one has not written its own yet
  const int64_t pid = k.pid;
  k = file->kv;
  k.pid = pid;
  k.counters = "file";
  return k;
}

namespace {

struct KvLines {
  std::mutex mutex;
  std::deque<std::pair<pid_t, KvStatsRecord>> by_pid;  // the newest last
};

KvLines& kv_lines() {
  static KvLines lines;
  return lines;
}

}  // namespace

void observe_kv_line(pid_t pid, const std::string& line) {
  auto parsed = parse_kv_stats(line);
  if (!parsed.ok()) {
    spdlog::debug("engine pid {}: ignored a malformed fastrestart-kv: line: {}", pid, escape_control_chars(parsed.error().message));
    return;
  }
  if (!*parsed) return;
  KvStatsRecord r = std::move(**parsed);
  r.kv.pid = pid;
  std::string reasons;
  for (const auto& [reason, n] : r.kv.dropped_by) reasons += (reasons.empty() ? " (" : ", ") + reason + " " + std::to_string(n);
  spdlog::info("engine pid {}: KV cache in {} memory, {} blocks of {} tokens, header {}: {} blocks recovered, {} dropped{}", pid,
               r.kv.location, r.kv.blocks, r.kv.block_tokens, r.kv.header, r.kv.recovered, r.kv.dropped(),
               reasons.empty() ? "" : reasons + ")");
  KvLines& k = kv_lines();
  std::lock_guard lk(k.mutex);
  std::erase_if(k.by_pid, [&](const auto& e) { return e.first == pid; });
  k.by_pid.emplace_back(pid, std::move(r));
  while (k.by_pid.size() > kMaxKvEngines) k.by_pid.pop_front();
}

std::optional<status::KvCacheStatus> kv_cache_of(pid_t pid, const std::string& file) {
  std::optional<KvStatsRecord> line;
  {
    KvLines& k = kv_lines();
    std::lock_guard lk(k.mutex);
    for (const auto& [p, r] : k.by_pid)
      if (p == pid) line = r;
  }
  if (!line) return std::nullopt;
  return kv_cache_with_file(*line, file);  // the file is read outside the lock
}

}  // namespace fr::supervisor
