// The engine's KV cache as status shows it (`kv_cache`; docs/kv-survival.md, "In fastrestartd's status"):
// what the current engine recovered from its KV arena after a restart, what it dropped and why, and its
// prefix cache's hits. Filled by fastrestartd from the engine's `fastrestart-kv:` line and its counters
// file (supervisor/kv_stats.h); null until the current engine printed the line.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace fr::status {

struct KvCacheStatus {
  int64_t pid = 0;          // the engine that printed the line
  std::string location;     // arena | private
  std::string header;       // empty | valid | the mismatch that dropped the whole index
  uint64_t blocks = 0;
  uint64_t block_tokens = 0;
  uint64_t recovered = 0;   // blocks kept after the restart
  std::map<std::string, uint64_t> dropped_by;  // reason -> blocks dropped
  uint64_t requests = 0, query_tokens = 0, hit_tokens = 0;
  // Where the counters came from: "file" (the engine's counters file, read for this status), or "line" (the
  // file was absent, a previous engine's, or unreadable: the line's figures, as the engine started).
  std::string counters = "line";
  std::string error;  // the counters file's fault, naming the file and the field; empty when none

  uint64_t dropped() const;
  std::optional<double> hit_rate() const;  // hit_tokens / query_tokens; none before a query
};

nlohmann::json to_json(const KvCacheStatus& k);
Status read_kv_cache_status(const nlohmann::json& j, const std::string& where, KvCacheStatus& k);

}  // namespace fr::status
