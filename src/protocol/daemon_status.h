// The weight daemon's status reply (docs/protocol.md, "status") as one typed struct and its codec. The
// daemon encodes it (src/daemon/server.cc); the supervisor, the snapshot exchange and fastrestart-weightctl
// decode it. Decoding is tolerant of absent fields (they keep their defaults) and strict about types: a
// mistyped field is an error naming it ("daemon_status.entries[0].progress.done_bytes: not an unsigned
// integer").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace fr::proto {

// A load's progress. fastrestartd's status shows each daemon's row with the same struct (status::DaemonRowStatus,
// the sum over its entries), where no one elapsed time applies: elapsed_s is left unset there and then
// absent on the wire.
struct DaemonProgress {
  uint64_t done_bytes = 0;
  uint64_t total_bytes = 0;
  std::optional<double> elapsed_s;  // the daemon sets it for every entry
  double rate_bytes_per_s = 0;
};

// One attach of an entry, or one attach miss of the daemon (`mode` holds the miss's reason).
struct DaemonClientRecord {
  int64_t pid = 0;
  uint64_t uid = 0;
  std::string mode;
  double unix_time = 0;
};

struct DaemonEntryStatus {
  std::string fingerprint;
  std::string state;  // loading | ready | failed
  std::string source;  // preload | publish
  uint64_t pool_bytes = 0;
  uint64_t data_bytes = 0;
  uint64_t tensors = 0;
  std::vector<std::string> files;
  std::map<std::string, std::string> config;
  std::optional<std::string> digest;  // hex; null on the wire when absent
  std::optional<std::string> error;   // null on the wire when absent
  DaemonProgress progress;
  std::vector<DaemonClientRecord> attaches;
};

// One KV arena (docs/weightd.md, "KV arenas"). fastrestartd's status lists the same rows under each native
// daemon (status::ArenaStatus is this struct), with last_wait_s under the key "waited_s".
struct DaemonArenaStatus {
  std::string name;
  uint64_t bytes = 0;       // as leased
  uint64_t pool_bytes = 0;  // allocated
  std::optional<int64_t> holder_pid;  // null on the wire when unleased (no holder, or it exited)
  uint64_t leases = 0;      // granted since the arena was made
  uint64_t generation = 0;  // the last lease's generation (1 for a new arena, +1 per lease); 0: never leased
  uint64_t waiting = 0;     // leases waiting now for the holder's exit
  std::optional<double> last_wait_s;  // the last lease's wait for its previous holder's exit; null: none waited
};

struct DaemonStatus {
  std::string backend, gpu_uuid, gpu_name;
  int64_t pid = 0;
  uint64_t held_bytes = 0;
  uint64_t clients = 0;
  // Entries dropped because a file they were loaded or published from changed on disk since: no attach
  // can match them again (docs/weightd.md, "Stale entries").
  uint64_t stale_dropped = 0;
  std::vector<DaemonEntryStatus> entries;
  std::vector<DaemonClientRecord> misses;  // `mode` is the reason
  uint64_t arena_bytes = 0;  // held by arenas, not counted in held_bytes
  std::vector<DaemonArenaStatus> arenas;
};

// The arena rows' codec, for the daemon's reply and fastrestartd's status alike: `wait_key` is the key of
// last_wait_s ("last_wait_s" in the daemon's reply, "waited_s" in fastrestartd's). read_arenas reads
// j[key] (absent or null: none) into `out`, naming "<where>.<key>[i].<field>" in errors.
nlohmann::json to_json(const DaemonArenaStatus& a, const char* wait_key);
Status read_arenas(const nlohmann::json& j, const char* key, const std::string& where, std::vector<DaemonArenaStatus>& out,
                   const char* wait_key);

// The progress object's codec, for the daemon's entries and fastrestartd's daemon rows alike: elapsed_s
// only when set. read_progress reads j["progress"] (absent or null: unchanged), naming
// "<where>.progress.<field>" in errors.
nlohmann::json to_json(const DaemonProgress& p);
Status read_progress(const nlohmann::json& j, const std::string& where, DaemonProgress& p);

// The reply without "ok" (the server adds it).
nlohmann::json to_json(const DaemonStatus& s);
// Accepts a whole reply ("ok" is ignored). `where` names the object in errors.
Result<DaemonStatus> daemon_status_from_json(const nlohmann::json& j, const std::string& where = "daemon_status");

}  // namespace fr::proto
