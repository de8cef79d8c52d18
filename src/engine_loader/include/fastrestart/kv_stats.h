// An engine's word on its KV cache's survival, for fastrestartd's status and /metrics (docs/kv-survival.md,
// "In fastrestartd's status"): what the engine recovered from its KV arena after a restart, what it dropped
// and why, and its prefix cache's hits.
//
// Two channels, one text form (a line starting `fastrestart-kv:`, then `key=value` words):
// - the engine prints the line once after it rebuilt its cache from the arena (and again after a
//   snapshot's resume rebuilt it), on its output, which fastrestartd reads;
// - the engine rewrites the counters file that fastrestartd names in $FASTRESTART_KV_STATS_FILE (one such
//   line) whenever its counters changed, and fastrestartd reads it when status or /metrics is asked.
//
// Words: `id` (this engine's random id: the file counts only when its id is the one the engine printed, so a
// previous engine's or a standby's file never shows), `location` (arena | private), `header` (what the
// arena's header was: empty, valid, or the mismatch that dropped the whole index: identity, layout,
// version, header_checksum, generation, foreign), `blocks`, `block_tokens`, `recovered` (blocks kept
// after the restart), `dropped.<reason>` (blocks dropped for that reason; one word per reason),
// `requests`, `query_tokens` and `hit_tokens` (prompt tokens looked up and found in the prefix cache).
// All numbers are unsigned decimal integers; hit_tokens <= query_tokens.
//
// Thread safety: a KvStatsReporter is not thread-safe; one thread writes its file.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "fastrestart/result.h"

namespace fastrestart {

using Status = fr::Status;

// The environment variable fastrestartd names the counters file in; unset: no file, the line only.
inline constexpr const char* kKvStatsFileEnv = "FASTRESTART_KV_STATS_FILE";

struct KvStats {
  std::string location = "arena";  // arena | private
  std::string header = "empty";    // empty | valid | the mismatch that dropped the whole index
  uint64_t blocks = 0;             // the cache's capacity
  uint64_t block_tokens = 0;
  uint64_t recovered = 0;                     // blocks kept from the arena by the last rebuild
  std::map<std::string, uint64_t> dropped;    // reason (a word: A-Z a-z 0-9 _ -) -> blocks dropped
  uint64_t requests = 0;      // requests that looked up the cache
  uint64_t query_tokens = 0;  // prompt tokens looked up
  uint64_t hit_tokens = 0;    // of them, found cached (not recomputed)
};

// The text form: "fastrestart-kv: id=<id> location=... header=... ...", no newline. Reasons that are not a
// word are left out (they would not parse).
std::string kv_stats_text(const KvStats& stats, const std::string& id);

class KvStatsReporter {
 public:
  // `path` empty: $FASTRESTART_KV_STATS_FILE (unset or empty: no file). The id is drawn at random here.
  explicit KvStatsReporter(std::string path = {});
  const std::string& id() const { return m_id; }
  const std::string& path() const { return m_path; }
  // The line to print after a rebuild.
  std::string line(const KvStats& stats) const { return kv_stats_text(stats, m_id); }
  // Rewrites the file (a temporary file renamed over it: a reader sees the old or the new text, whole);
  // nothing when there is no path. Not fsync'ed: counters, not data. Errors name the path.
  Status write(const KvStats& stats) const;

 private:
  std::string m_path;
  std::string m_id;
};

}  // namespace fastrestart
