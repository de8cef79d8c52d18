#include "supervisor/engine_progress.h"

#include <cctype>
#include <cstdio>
#include <sstream>

#include "common/parse_number.h"

namespace fr::supervisor {
namespace {

constexpr const char* kMarker = "fastrestart-progress:";

bool is_word(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

std::string mib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, b >= (10ull << 30) ? "%.0f GiB" : b >= (1ull << 30) ? "%.1f GiB" : "%.0f MiB",
                b >= (1ull << 30) ? static_cast<double>(b) / (1ull << 30) : static_cast<double>(b) / (1ull << 20));
  return buf;
}

}  // namespace

std::string EngineProgress::text() const {
  if (unit == "bytes") {
    // In 128 bits: the engine's numbers may be anything up to 2^64 - 1, and done * 100 wrapped past 2^64.
    __extension__ typedef unsigned __int128 Wide;
    const unsigned pct = total ? static_cast<unsigned>(Wide{done} * 100 / total) : 100;
    return phase + " " + std::to_string(pct) + "% (" + mib(done) + " of " + mib(total) + ")";
  }
  return phase + " " + std::to_string(done) + "/" + std::to_string(total) + (unit.empty() ? "" : " " + unit);
}

std::optional<EngineProgress> parse_engine_progress(const std::string& line) {
  const auto at = line.find(kMarker);
  if (at == std::string::npos) return std::nullopt;
  std::istringstream in(line.substr(at + std::char_traits<char>::length(kMarker)));
  EngineProgress p;
  std::optional<uint64_t> done, total;
  std::string word;
  while (in >> word) {
    const auto eq = word.find('=');
    if (eq == std::string::npos) return std::nullopt;
    const std::string k = word.substr(0, eq), v = word.substr(eq + 1);
    if (k == "phase" && is_word(v)) p.phase = v;
    else if (k == "done") done = to_u64(v);
    else if (k == "total") total = to_u64(v);
    else if (k == "unit" && is_word(v)) p.unit = v;
    // other keys: ignored, so engines may add their own
  }
  if (p.phase.empty() || !done || !total || *done > *total) return std::nullopt;
  p.done = *done;
  p.total = *total;
  return p;
}

std::optional<EngineProgress> parse_progress_pattern(const std::vector<ProgressPattern>& patterns, const std::string& line) {
  for (const auto& pat : patterns) {
    if (line.find(pat.contains) == std::string::npos) continue;
    const auto at = line.find(pat.after);
    if (at == std::string::npos) continue;
    std::string word = line.substr(at + pat.after.size());
    word = word.substr(0, word.find_first_of(" \t\r["));
    const auto slash = word.find('/');
    if (slash == std::string::npos) continue;
    auto done = to_u64(word.substr(0, slash)), total = to_u64(word.substr(slash + 1));
    if (!done || !total || *done > *total) continue;
    return EngineProgress{pat.phase, *done, *total, pat.unit};
  }
  return std::nullopt;
}

}  // namespace fr::supervisor
