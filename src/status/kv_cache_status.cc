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
  return {{"pid", k.pid}, {"location", k.location}, {"header", k.header}, {"blocks", k.blocks},
          {"block_tokens", k.block_tokens}, {"recovered", k.recovered}, {"dropped", k.dropped()},
          {"dropped_by", json(k.dropped_by)},
          {"prefix", {{"requests", k.requests}, {"query_tokens", k.query_tokens}, {"hit_tokens", k.hit_tokens},
                      {"hit_rate", json_fields::or_null(rate)}}},
          {"counters", k.counters}, {"error", k.error}};
}

Status read_kv_cache_status(const json& j, const std::string& w, KvCacheStatus& k) {
  using json_fields::fields;
  FR_TRY(fields(j, w, "pid", k.pid, "location", k.location, "header", k.header, "blocks", k.blocks, "block_tokens",
                k.block_tokens, "recovered", k.recovered, "dropped_by", k.dropped_by));
  FR_TRY(json_fields::child_fields(j, "prefix", w, "requests", k.requests, "query_tokens", k.query_tokens, "hit_tokens",
                                   k.hit_tokens));
  return fields(j, w, "counters", k.counters, "error", k.error);
}

}  // namespace fr::status
