// The front's counters (docs/front.md, "Status"): what fastrestartd shows in status and /metrics.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace fr::front {

struct FrontStats {
  uint64_t received = 0;   // complete requests read from clients
  uint64_t answered = 0;   // answers the engine gave that reached a client whole
  uint64_t held = 0;       // requests held at least once (the engine could not be reached or died)
  uint64_t held_now = 0;   // held at this moment
  uint64_t resent = 0;     // sends after the first (each held request's retries)
  uint64_t continued = 0;  // started streams the client read whole although their engine died

  uint64_t connections = 0;  // client connections open now
  uint64_t upstream_connects = 0;  // connections opened to the engine (fewer than requests: the pool)
  uint64_t upstream_idle = 0;      // kept-alive connections to the engine waiting now
  std::map<std::string, uint64_t> rejected;  // answered by the front itself, by status ("400", "413", "431")
  std::map<std::string, uint64_t> failed;    // not answered by the engine, by reason
  std::map<std::string, uint64_t> not_continued;  // streams cut (stream_interrupted), by why (splice.h)

  nlohmann::json to_json() const;
};

// Reasons in `failed` (docs/front.md).
inline constexpr const char* kHoldTimeout = "hold_timeout";
inline constexpr const char* kTooManyHeld = "too_many_held";
inline constexpr const char* kStreamInterrupted = "stream_interrupted";
inline constexpr const char* kResponseTooLarge = "response_too_large";
inline constexpr const char* kClientGone = "client_gone";
inline constexpr const char* kStopping = "stopping";

}  // namespace fr::front
