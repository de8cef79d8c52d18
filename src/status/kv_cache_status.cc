#include "status/kv_cache_status.h"

#include "common/json_fields.h"

namespace fr::status {

using nlohmann::json;

uint64_t KvCacheStatus::dropped() const {
  uint64_t n = 0;
  for (const auto& [reason, b] : dropped_by) n += b;
  return n;
}

std::optional<double> KvCacheStatus::hit_rate() const {
  if (query_tokens == 0) return std::nullopt;
  return static_cast<double>(hit_tokens) / static_cast<double>(query_tokens);
}

json to_json(const KvCacheStatus& k) {
  const auto rate = k.hit_rate();
  return {{"pid", k.pid},
          {"location", k.location},
          {"header", k.header},
          {"blocks", k.blocks},
          {"block_tokens", k.block_tokens},
          {"recovered", k.recovered},
          {"dropped", k.dropped()},
          {"dropped_by", json(k.dropped_by)},
          {"prefix", {{"requests", k.requests}, {"query_tokens", k.query_tokens}, {"hit_tokens", k.hit_tokens},
                      {"hit_rate", rate ? json(*rate) : json(nullptr)}}},
          {"counters", k.counters},
          {"error", k.error}};
}

Status read_kv_cache_status(const json& j, const std::string& w, KvCacheStatus& k) {
  using json_fields::field;
  FR_TRY(json_fields::object(j, w));
  FR_TRY(field(j, "pid", w, k.pid));
  FR_TRY(field(j, "location", w, k.location));
  FR_TRY(field(j, "header", w, k.header));
  FR_TRY(field(j, "blocks", w, k.blocks));
  FR_TRY(field(j, "block_tokens", w, k.block_tokens));
  FR_TRY(field(j, "recovered", w, k.recovered));
  FR_TRY(field(j, "dropped_by", w, k.dropped_by));
  if (auto it = j.find("prefix"); it != j.end() && !it->is_null()) {
    const std::string pw = w + ".prefix";
    FR_TRY(json_fields::object(*it, pw));
    FR_TRY(field(*it, "requests", pw, k.requests));
    FR_TRY(field(*it, "query_tokens", pw, k.query_tokens));
    FR_TRY(field(*it, "hit_tokens", pw, k.hit_tokens));
  }
  FR_TRY(field(j, "counters", w, k.counters));
  FR_TRY(field(j, "error", w, k.error));
  return {};
}

}  // namespace fr::status
