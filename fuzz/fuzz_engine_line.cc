// libFuzzer target: one line of an engine's output as fastrestartd reads it (Supervisor::engine_line_handler):
// the `fastrestart-arena:` line (arena_line.h), the `fastrestart-loader:` result line and the vLLM report
// (engines/vllm/vllm_report.h), the `fastrestart-progress:` line (engine_progress.h) and the
// `fastrestart-kv:` line (kv_stats.h, also the text of its counters file). The engine is
// another process and may print anything. Never a crash, a hang or an exception; what parses is within the
// documented bounds and parses again the same when printed the way the engine prints it; what goes into
// status stays valid UTF-8 when the line was.
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "supervisor/arena_line.h"
#include "supervisor/arena_outcome.h"
#include "supervisor/engine_progress.h"
#include "supervisor/kv_stats.h"
#include "supervisor/engines/vllm/vllm_report.h"
#include "supervisor/engines/vllm/vllm_rules.h"

using namespace fr::supervisor;

namespace {

bool valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();  // strict: throws on invalid UTF-8
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

std::string decimal(double v) {  // the shortest fixed-point text that reads back as v
  char buf[400];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  if (ec != std::errc()) __builtin_trap();
  return std::string(buf, p);
}

std::string quoted(const std::string& s) {  // as arena_line.h reads a quoted value
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + '"';
}

void check_arena(const std::string& line) {
  auto a = parse_arena_line(line);
  if (!a.ok()) {
    if (a.error().message.rfind("fastrestart-arena: ", 0) != 0) __builtin_trap();
    return;
  }
  if (!*a) {
    if (line.find("fastrestart-arena:") != std::string::npos) __builtin_trap();
    return;
  }
  const ArenaLine& l = **a;
  std::string again;
  if (l.outcome == "leased") {
    if (l.name.empty() || l.name.size() > 64 || l.bytes == 0 || l.generation == 0) __builtin_trap();
    if (!std::isfinite(l.waited_s) || l.waited_s < 0 || !std::isfinite(l.swap_s) || l.swap_s < 0) __builtin_trap();
    again = "fastrestart-arena: leased name=" + l.name + " bytes=" + std::to_string(l.bytes) + " waited_s=" +
            decimal(l.waited_s) + " swap_s=" + decimal(l.swap_s) + " generation=" + std::to_string(l.generation);
  } else {
    if (l.reason.empty() || l.reason.size() > kMaxArenaReason + 3 || l.reason.find('\0') != std::string::npos) __builtin_trap();
    // A reason cut to its bound is cut on a character's start: status (JSON) holds it as it was sent.
    if (valid_utf8(line) && !valid_utf8(l.reason)) __builtin_trap();
    if (l.reason.size() <= kMaxArenaReason) again = "fastrestart-arena: fallback reason=" + quoted(l.reason);
  }
  if (again.empty() || again.size() > kMaxArenaLine) return;
  auto b = parse_arena_line(again);
  if (!b.ok() || !*b) __builtin_trap();
  const ArenaLine& m = **b;
  if (m.outcome != l.outcome || m.name != l.name || m.bytes != l.bytes || m.generation != l.generation ||
      m.waited_s != l.waited_s || m.swap_s != l.swap_s || m.reason != l.reason)
    __builtin_trap();
  // What status records of it: encodable (the control reply replaces what is not UTF-8).
  if (auto o = arena_outcome_of_line(line, 4242); !o || o->outcome != l.outcome) __builtin_trap();
}

void check_loader(const std::string& line) {
  auto r = parse_loader_line(line);
  if (!r) return;
  if (r->result != "hit" && r->result != "miss" && r->result != "fallback" && r->result != "fail") __builtin_trap();
  if (r->fields.count("v") || r->fields.count("result")) __builtin_trap();
}

void check_progress(const std::string& line) {
  auto p = parse_engine_progress(line);
  if (!p) return;
  if (p->phase.empty() || p->done > p->total) __builtin_trap();
  const std::string text = p->text();
  // "disk_read 42% (...)": the share done, rounded down, whatever the sizes.
  if (p->unit == "bytes") {
    const size_t pct_at = p->phase.size() + 1, pct_end = text.find('%', pct_at);
    unsigned pct = 0;
    if (pct_end == std::string::npos) __builtin_trap();
    std::from_chars(text.data() + pct_at, text.data() + pct_end, pct);
    const auto want = p->total ? static_cast<unsigned>(static_cast<unsigned __int128>(p->done) * 100 / p->total) : 100u;
    if (pct != want) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // arena_outcome_of_line logs what it records
  return 0;
}

// A kv line: refused, or within its bounds; what status and fastrestartctl make of it never throws.
void check_kv(const std::string& line) {
  auto k = parse_kv_stats(line);
  if (!k.ok()) {
    if (k.error().message.empty()) __builtin_trap();
    return;
  }
  if (!*k) {
    if (line.find("fastrestart-kv:") != std::string::npos) __builtin_trap();
    return;
  }
  const auto& r = **k;
  if (r.id.empty() || r.id.size() > 32 || r.kv.dropped_by.size() > kMaxKvReasons || r.kv.hit_tokens > r.kv.query_tokens ||
      line.size() > kMaxKvStatsText)
    __builtin_trap();
  if (auto rate = r.kv.hit_rate(); rate && (*rate < 0 || *rate > 1)) __builtin_trap();
  (void)fr::status::to_json(r.kv).dump();  // words only: valid UTF-8, or dump() throws and the fuzzer reports it
  (void)kv_cache_text(r.kv);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  check_arena(line);
  check_loader(line);
  check_progress(line);
  check_kv(line);
  static const VllmRules& rules = builtin_vllm_rules();
  VllmReport report;
  report.observe(rules, line);
  report.finish(rules);
  (void)report.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return 0;
}
