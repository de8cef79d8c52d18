// KV arenas: memory the daemon holds for an engine's KV cache, leased read-write to one process at a time
// (docs/weightd.md, "KV arenas"; docs/protocol.md, "arena_lease", "Arena security").
//
// Contract
// - Who: only processes running as the policy's uid (the engine's, --arena-uid) lease or release an arena,
//   whatever the socket's group lets connect; with a name list (--arena-name) only those names exist.
// - The holder is the process that sent the lease request, as the kernel named it for that message
//   (SCM_PIDFD; else SO_PEERPIDFD when its pid is the one SCM_CREDENTIALS gives), never the process that
//   connected. A requester the kernel cannot name, or that has already exited, is refused.
// - An arena is made through the Backend on its first lease (host: a memfd; CUDA: a VMM allocation),
//   zero-filled then, its size fixed at once (Pool::fix_size). It outlives its holder: when the holder dies
//   the arena, and its bytes, wait for the next lease. Its bytes are cleared (Pool::zero) when the next
//   holder runs as another uid than the last; never on a lease by the same uid (the warm restart path).
// - One holder at a time. A lease is granted to another process only once the previous holder has exited,
//   as its pidfd says (readable once the process is gone, its memory and descriptors released), never when
//   its connection closes: a killed engine's GPU kernels may keep writing until its exit, and the next
//   engine must not see those writes. The holder itself may lease again (another descriptor of the same
//   memory).
// - One waiting lease per arena: a newer request supersedes the one waiting (which fails with kCancelled),
//   so a restarted engine is never queued behind a stale waiter.
// - A lease with another size waits for the holder like any other, then drops the old arena and makes a
//   new one (zero-filled); the grant says so.
// - All arenas together hold at most policy.max_bytes (pool bytes) and number at most policy.max_arenas.
// - Thread-safety: every method may be called from any connection thread; one mutex guards the table.
//   A waiting lease holds no lock while it waits.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/unix_socket.h"
#include "daemon/backend.h"
#include "protocol/arena.h"
#include "protocol/daemon_status.h"

namespace fr::daemon {

struct ArenaPolicy {
  uid_t uid = 0;                  // the only uid that may lease or release (the engine's)
  size_t max_arenas = 4;
  uint64_t max_bytes = 0;         // pool bytes of all arenas together
  std::set<std::string> names;    // empty: any valid name
};

// The process that sent one request, as the kernel named it for that message.
struct Requester {
  pid_t pid = 0;
  uid_t uid = 0;
  UniqueFd pidfd;
};

// Names the sender of a request from its frame's credentials: SCM_PIDFD, or, where the kernel gave none,
// SO_PEERPIDFD of `sock` when it names the very pid of the message's SCM_CREDENTIALS. kPermissionDenied
// naming why when the kernel cannot name it reliably, or when the sender has already exited.
Result<Requester> requester_of(const MessageSender& sender, bool senders_differ, int sock, const char* op);

// A lease granted: the memory, and the lease reply that describes it (docs/protocol.md, "arena_lease"), whole
// but for its `backend`, which the server names.
struct ArenaGrant {
  UniqueFd fd;                  // read-write: a memfd (host) or an exported VMM handle (CUDA)
  proto::ArenaLeaseReply reply;
};

struct ArenaEviction {
  uint64_t dropped = 0, freed_bytes = 0;
  std::vector<std::string> kept;  // held by a live process
};

class ArenaTable {
 public:
  ArenaTable(Backend& backend, ArenaPolicy policy);
  ~ArenaTable();

  // Grants `req` to `who`, waiting at most req.wait_s for the previous holder's exit. `sock` is the
  // request's connection (its hang-up ends the wait); `*waiting` is true while the lease waits. Errors:
  // kPermissionDenied (another uid, a name not on the list, the requester exited), kTimeout (naming wait_s
  // and the holder), kBusy (the table or the byte budget is full), kCancelled (the requester hung up, a
  // newer request superseded this one, or the daemon stops), backend errors.
  Result<ArenaGrant> lease(const proto::ArenaLeaseRequest& req, const Requester& who, int sock, std::atomic<bool>* waiting);
  // Drops arena `name` (its memory goes once its holder unmaps it). Only the policy's uid; refused with
  // kBusy while another live process holds it. Returns the pool bytes dropped.
  Result<uint64_t> release(const std::string& name, const Requester& who);
  // Drops every arena no live process holds (evict --all).
  ArenaEviction evict_unheld();

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
    std::optional<uid_t> last_uid;           // the uid of the last holder: another one gets cleared memory
    uint64_t leases = 0, generation = 0, waiting = 0;
    uint64_t wait_ticket = 0;                // the one waiting request allowed to be granted
    std::optional<double> last_wait_s;       // of the last lease that had to wait for a previous holder
  };
  // REQUIRES: m_mu held. Clears the holder when its pidfd says it exited; true when unheld afterwards.
  bool holder_gone(Arena& a);
  Status allowed(const std::string& name, const Requester& who, const char* op) const;
  uint64_t bytes_except(const std::string& name) const;  // REQUIRES: m_mu held

  Backend& m_backend;
  const ArenaPolicy m_policy;
  std::mutex m_mu;
  std::map<std::string, Arena> m_arenas;  // GUARDED_BY(m_mu)
  uint64_t m_tickets = 0;                  // GUARDED_BY(m_mu)
  bool m_stopping = false;                 // GUARDED_BY(m_mu)
  UniqueFd m_stop_r, m_stop_w;             // a pipe: stop() closes the write end and wakes every poll
};

}  // namespace fr::daemon
