// The engine's word on its KV cache's survival (docs/kv-survival.md, "In fastrestartd's status"): its
// `fastrestart-kv:` line, printed once after it rebuilt its cache from the KV arena, and its counters file
// ($FASTRESTART_KV_STATS_FILE, that same text, rewritten while it serves), read when status or /metrics is
// asked. The engine side is engine_loader's fastrestart/kv_stats.h (the text form is documented there).
// Contract:
// - parse_kv_stats: nullopt for text without the marker; an error (Errc::kInvalidArgument) naming the field
//   for one that does not parse ("hit_tokens: not an unsigned integer"). Bounded (kMaxKvStatsText bytes,
//   kMaxKvReasons reasons); keys it does not know are ignored (engines may add their own); a key given
//   twice is an error. Never throws.
// - read_kv_stats_file: the file's text parsed; every error names the file ("<path>: hit_tokens: ...").
//   A missing file is Errc::kNotFound (the engine has not written it yet).
// - kv_cache_with_file: the line's record updated with the file's counters when the file is this engine's
//   (the same id); a malformed file keeps the line's figures and says why in `error`.
// - observe_kv_line / kv_cache_of: fastrestartd's record of what its engines printed, by engine pid (the
//   last kMaxKvEngines engines). The Supervisor's line handler feeds it; its status reads it. Kept here,
//   by pid, rather than in the engine's record, so that an engine kind or a standby needs nothing to take
//   part. Thread-safe.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "status/kv_cache_status.h"

namespace fr::supervisor {

inline constexpr size_t kMaxKvStatsText = 4096;
inline constexpr size_t kMaxKvReasons = 32;
inline constexpr size_t kMaxKvEngines = 8;
// The variable that names the counters file to the engine, and the file's name in the state directory.
inline constexpr const char* kKvStatsEnv = "FASTRESTART_KV_STATS_FILE";
inline constexpr const char* kKvStatsFileName = "kv-stats";

struct KvStatsRecord {
  std::string id;  // the engine's random id, 1-32 of 0-9 a-f
  status::KvCacheStatus kv;  // pid, counters and error are the caller's
};

Result<std::optional<KvStatsRecord>> parse_kv_stats(std::string_view text);
Result<KvStatsRecord> read_kv_stats_file(const std::string& path);
status::KvCacheStatus kv_cache_with_file(const KvStatsRecord& line, const std::string& path);
// fastrestartctl status's row: "pid 42 arena, 64 blocks of 16 tokens, header valid: 58 recovered, 3 dropped
// (orphan 3); prefix hits 896 of 1000 tokens (89.6%) in 5 requests".
std::string kv_cache_text(const status::KvCacheStatus& k);

// An engine's output line: a fastrestart-kv: line is recorded for `pid` (the last one counts) and logged;
// a malformed one costs a debug log line; any other line, nothing.
void observe_kv_line(pid_t pid, const std::string& line);
// Status `kv_cache` of the engine `pid`: its line's record with the counters of `file`; nullopt until it
// printed one.
std::optional<status::KvCacheStatus> kv_cache_of(pid_t pid, const std::string& file);

}  // namespace fr::supervisor
