#include "supervisor/memory_share.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace fr::supervisor {

std::string gb_text(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GB", bytes / 1e9);
  return b;
}

namespace {

std::string share_gb(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f GB", bytes / 1e9);
  return b;
}

std::string share_fraction(double f) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4f", f);
  return b;
}

}  // namespace

uint64_t held_outside(uint64_t daemon_bytes, uint64_t arena_bytes) {
  return daemon_bytes >= arena_bytes ? daemon_bytes - arena_bytes : 0;
}

GpuShare engine_share(const GpuShareInput& in, double utilization, bool held_is_used) {
  GpuShare s{in, utilization};
  if (in.total == 0) return s;  // unknown size: nothing to subtract from
  const double total = static_cast<double>(in.total);
  double f = utilization - static_cast<double>(in.reserve) / total;
  if (held_is_used) f -= static_cast<double>(in.held) / total;
  // in.arena is deliberately not subtracted: the arena is the engine's KV cache, part of its share.
  const double units = std::floor(std::min(f, utilization) * 10000);
  s.share = units / 10000;
  if (units > 0) {
    // floor(total x units / 10^4) in integers, exact to the byte: total = q x 10^4 + r, and r x units
    // stays below 10^8 (units <= 10^4), so nothing overflows whatever total is.
    const uint64_t u = static_cast<uint64_t>(units), q = in.total / 10000, r = in.total % 10000;
    s.share_bytes = q * u + r * u / 10000;
    s.own_bytes = s.share_bytes > in.arena ? s.share_bytes - in.arena : 0;
  }
  return s;
}

std::string share_refusal(const std::vector<GpuShare>& shares, double utilization, double min_share,
                          bool held_is_used) {
  std::string out;
  for (const auto& s : shares) {
    if (s.in.total == 0 || s.share >= min_share) continue;
    const double total = static_cast<double>(s.in.total);
    if (!out.empty()) out += "; ";
    out += "GPU " + s.in.gpu + ": share " + share_fraction(s.share) + " is below memory.min_share " +
           share_fraction(min_share) + " (total " + share_gb(total) + ", budget " + share_gb(utilization * total) +
           " at memory.utilization " + share_fraction(utilization) + ", weight daemon holds " +
           share_gb(static_cast<double>(s.in.held)) + (held_is_used ? "" : " (not counted: weights.mode is not zero_copy)") +
           ", standby reserve " + share_gb(static_cast<double>(s.in.reserve)) +
           (s.in.arena ? ", KV arena " + share_gb(static_cast<double>(s.in.arena)) + " (inside the share)" : "") + ")";
  }
  return out;
}

}  // namespace fr::supervisor
