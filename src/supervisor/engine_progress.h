// An engine's own load progress, read from its output (docs/supervisor.md, "Engine progress"): a line
// holding `fastrestart-progress:` and then `key=value` words. Fields: `phase` (a word, e.g. disk_read),
// `done` and `total` (non-negative integers, done <= total), optional `unit` (`bytes`, or any word: shown as
// is). The tiny engine and the reference engine print it while they load; any engine may.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fr::supervisor {

struct EngineProgress {
  std::string phase;
  uint64_t done = 0;
  uint64_t total = 0;
  std::string unit;  // "bytes", another word, or empty

  // "disk_read 42% (215 MiB of 512 MiB)"; "load_shards 2/4" for units that are not bytes.
  std::string text() const;
};

// The progress a line reports, or nothing when it is not a well-formed progress line.
std::optional<EngineProgress> parse_engine_progress(const std::string& line);

// An engine's own progress output that is not in our format, described as data (data/vllm.toml
// [[progress]]: vLLM's tqdm bars): a line containing `contains`, then after `after` a word "N/M".
struct ProgressPattern {
  std::string contains;
  std::string after;
  std::string phase;
  std::string unit;
};

// The progress the first matching pattern reads from `line` (ANSI colours stripped by the caller).
std::optional<EngineProgress> parse_progress_pattern(const std::vector<ProgressPattern>& patterns, const std::string& line);

}  // namespace fr::supervisor
