// The KV-arena requests of the weight-daemon protocol (docs/protocol.md, "arena_lease", "arena_release"):
// the one arena-name rule, and the codecs of the lease request, its reply, the release request and its
// reply. The daemon decodes requests and encodes replies with these; the engine's library and
// fastrestart-weightctl encode requests (the engine's library decodes the lease reply; weightctl prints the
// release reply as it came).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "protocol/frame.h"

namespace fr::proto {

inline constexpr size_t kMaxArenaName = 64;
inline constexpr uint64_t kMaxArenaBytes = uint64_t{1} << 50;  // 1 PiB: far above any GPU, below overflow
inline constexpr double kDefaultArenaWaitS = 30;

// The arena-name rule: 1-64 of A-Z a-z 0-9 _ . -
bool valid_arena_name(std::string_view name);
// Errc::kInvalidArgument "<where>: not 1-64 of A-Z a-z 0-9 _ . -" (the name quoted, cut at 80) when invalid.
Status check_arena_name(std::string_view name, const std::string& where);
// The lease's wait rule, the same for the request on the wire and the engine's ArenaOptions:
// Errc::kInvalidArgument "<where>: outside 0..86400" unless 0 <= wait_s <= kMaxWaitS.
Status check_arena_wait(double wait_s, const std::string& where);

struct ArenaLeaseRequest {
  std::string name;                  // valid_arena_name
  uint64_t bytes = 0;                // 1 .. kMaxArenaBytes
  double wait_s = kDefaultArenaWaitS;  // 0 .. kMaxWaitS: how long to wait for the previous holder's exit
};
json to_json(const ArenaLeaseRequest& r);  // with "op": "arena_lease"
// Errors name the field ("arena_lease.bytes: ...").
Result<ArenaLeaseRequest> arena_lease_from_json(const json& j);

struct ArenaLeaseReply {
  std::string name;
  uint64_t bytes = 0;       // as asked
  uint64_t pool_bytes = 0;  // allocated (rounded up to the page or the VMM granularity)
  std::string backend;
  bool created = false;  // new memory (zero-filled)
  bool resized = false;  // an arena of another size was dropped
  bool zeroed = false;   // existing memory cleared because its previous holder ran as another uid
  std::optional<uint64_t> previous_bytes;      // the dropped arena's size when resized
  std::optional<int64_t> previous_holder_pid;  // whose exit this lease waited for
  double waited_s = 0;
  uint64_t leases = 0;
  uint64_t generation = 0;
};
json to_json(const ArenaLeaseReply& r);  // without "ok"
Result<ArenaLeaseReply> arena_lease_reply_from_json(const json& j);

struct ArenaReleaseRequest {
  std::string name;
};
json to_json(const ArenaReleaseRequest& r);  // with "op": "arena_release"
Result<ArenaReleaseRequest> arena_release_from_json(const json& j);

struct ArenaReleaseReply {
  std::string name;
  uint64_t freed_bytes = 0;  // the dropped arena's pool; its memory goes when a holder that released it unmaps
};
json to_json(const ArenaReleaseReply& r);  // without "ok"

}  // namespace fr::proto
