// KV arenas: memory the daemon holds for an engine's KV cache, leased read-write to one process at a time
// (docs/weightd.md, "KV arenas"; docs/protocol.md, "arena_lease").
//
// Contract
// - An arena is made through the Backend on its first lease (host: a memfd; CUDA: a VMM allocation) and is
//   never sealed. It outlives its holder: when the holder dies the arena, and its bytes, wait for the next
//   lease. The daemon never reads or clears it after creation (zero-filled then).
// - One holder at a time. A lease is granted to another process only once the previous holder has exited,
//   as its pidfd says (readable once the process is gone, its memory and descriptors released), never when
//   its connection closes: a killed engine's GPU kernels may keep writing until its exit, and the next
//   engine must not see those writes. The holder itself may lease again (another descriptor of the same
//   memory).
// - A lease with another size waits for the holder like any other, then drops the old arena and makes a
//   new one (zero-filled); the grant says so.
// - Thread-safety: every method may be called from any connection thread; one mutex guards the table.
//   A waiting lease holds no lock while it waits.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"
#include "daemon/backend.h"
#include "protocol/daemon_status.h"
#include "protocol/messages.h"

namespace fr::daemon {

inline constexpr size_t kMaxArenaName = 64;
inline constexpr uint64_t kMaxArenaBytes = uint64_t{1} << 50;  // 1 PiB: far above any GPU, below overflow

struct ArenaLeaseRequest {
  std::string name;   // 1-64 of A-Z a-z 0-9 _ . -
  uint64_t bytes = 0;  // 1 .. kMaxArenaBytes
  double wait_s = 30;  // how long to wait for the previous holder's exit
};

// Parses an arena_lease request; errors name the field ("arena_lease.bytes: ...").
Result<ArenaLeaseRequest> arena_lease_from_json(const proto::json& req);

struct ArenaGrant {
  UniqueFd fd;                  // read-write: a memfd (host) or an exported VMM handle (CUDA)
  uint64_t bytes = 0;           // as asked
  uint64_t pool_bytes = 0;      // allocated (rounded up to the page or the VMM granularity)
  bool created = false;         // new (zero-filled) memory: nothing an earlier holder wrote is in it
  std::optional<uint64_t> resized_from;  // the dropped arena's size, when the size changed
  std::optional<pid_t> previous_holder;  // whose exit this lease waited for, if it waited
  double waited_s = 0;          // time spent waiting for the previous holder's exit
  uint64_t leases = 0;          // leases granted on this arena, this one included
  uint64_t generation = 0;      // 1 for a new arena, +1 per lease: names this lease in records
};

class ArenaTable {
 public:
  ArenaTable(Backend& backend, size_t max_arenas);
  ~ArenaTable();

  // Grants `req` to `peer_pid`, the process on the connection `sock` (its SO_PEERCRED pid), waiting at
  // most req.wait_s for the previous holder's exit. Errors: kTimeout (naming wait_s and the holder),
  // kBusy (the table is full), kCancelled (the requester hung up, or the daemon stops), backend errors.
  Result<ArenaGrant> lease(const ArenaLeaseRequest& req, pid_t peer_pid, int sock);

  // For status: holders that exited are reported (and recorded) as gone.
  std::vector<proto::DaemonArenaStatus> status();
  uint64_t held_bytes();
  // Wakes every waiting lease (they fail with kCancelled); later leases fail at once.
  void stop();

 private:
  struct Arena {
    std::string name;
    uint64_t bytes = 0;
    std::unique_ptr<Pool> pool;
    std::optional<pid_t> holder;
    std::shared_ptr<UniqueFd> holder_pidfd;  // shared: a waiter polls it without the lock
    uint64_t leases = 0, generation = 0, waiting = 0;
    std::optional<double> last_wait_s;       // of the last lease that had to wait for a previous holder
  };
  // REQUIRES: m_mu held. Clears the holder when its pidfd says it exited; true when unheld afterwards.
  bool holder_gone(Arena& a);

  Backend& m_backend;
  const size_t m_max;
  std::mutex m_mu;
  std::map<std::string, Arena> m_arenas;  // GUARDED_BY(m_mu)
  bool m_stopping = false;                 // GUARDED_BY(m_mu)
  UniqueFd m_stop_r, m_stop_w;             // a pipe: stop() closes the write end and wakes every poll
};

// A pidfd for the process on `sock`: SO_PEERPIDFD (Linux 6.5) names exactly the peer; older kernels fall
// back to pidfd_open(pid), which is the same process unless it exited and its pid was reused in between.
Result<UniqueFd> peer_pidfd(int sock, pid_t pid);

}  // namespace fr::daemon
