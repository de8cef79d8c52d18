#include "front/stats.h"

#include <unistd.h>

namespace fr::front {

nlohmann::json FrontStats::to_json() const {
  nlohmann::json failed_j = nlohmann::json::object(), rejected_j = nlohmann::json::object();
  nlohmann::json not_continued_j = nlohmann::json::object();
  for (const auto& [k, v] : not_continued) not_continued_j[k] = v;
  for (const char* r : {kHoldTimeout, kTooManyHeld, kStreamInterrupted, kResponseTooLarge, kClientGone, kStopping})
    failed_j[r] = 0;
  for (const auto& [k, v] : failed) failed_j[k] = v;
  for (const auto& [k, v] : rejected) rejected_j[k] = v;
  return {{"pid", ::getpid()},
          {"connections", connections},
          {"upstream", {{"connects", upstream_connects}, {"idle", upstream_idle}}},
          {"requests",
           {{"received", received},
            {"answered", answered},
            {"held", held},
            {"held_now", held_now},
            {"resent", resent},
            {"continued", continued},
            {"rejected", rejected_j},
            {"failed", failed_j},
            {"not_continued", not_continued_j}}}};
}

}  // namespace fr::front
