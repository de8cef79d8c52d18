// KV arenas: an engine's KV cache in memory the weight daemon holds, leased to one process at a time and
// mapped at an address the engine chose before it had the memory (docs/engine_loader.md, "KV arenas").
//
// Contract
// - reserve_arena() reserves the range (its size rounded up to the page, or the CUDA VMM granularity) and
//   backs it with a placeholder: one small allocation (range/1024, at least a page or a granule) mapped
//   read-write again and again over the whole range. Kernels, CUDA graphs and pointers made over the range
//   stay valid across swap_in(), which leases the arena from the daemon and maps it over the whole range at
//   the same address. lease_arena() is both at once (a live start).
// - The placeholder aliases: every chunk of the range is the same memory. Only memory that is rewritten
//   before it is read after the swap may live in the range while it is a placeholder (the KV blocks
//   themselves: a block is written by the step that fills it before any step reads it). Block tables, slot
//   mappings, pointer arrays or anything read before it is written must live elsewhere: on the
//   placeholder they would read what another chunk wrote.
// - The lease: the daemon grants the arena to this process only once its previous holder has exited (never
//   on its connection's close), waiting at most ArenaOptions::wait_s. The lease is the process's: it ends
//   when this process exits, not when the Arena is destroyed (destroying it unmaps and frees the range, and
//   a new lease in this process is granted at once). What a previous holder wrote is still in the arena
//   unless ArenaLease::created says it is new (zero-filled).
// - Errors: a daemon that is absent or refuses, a wait that runs out (Errc::kTimeout, naming wait_s and the
//   holder's pid), an arena of another size held by this process (Errc::kBusy). No fallback: an engine
//   without its arena allocates its KV cache itself.
// - Threading: an Arena is not thread-safe; swap_in() must not race with device work on the range (CUDA:
//   it synchronizes this process's context first).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "fastrestart/result.h"

namespace fastrestart {

using fr::Errc;
using fr::Error;
template <typename T>
using Result = fr::Result<T>;
using Status = fr::Status;

struct ArenaOptions {
  std::string name = "kv";         // the daemon's name for it: 1-64 of A-Z a-z 0-9 _ . -
  uint64_t bytes = 0;              // the KV cache's size; another size than the daemon's makes a new arena
  double wait_s = 30;              // how long the lease may wait for the previous holder's exit
  double connect_timeout_s = 5.0;  // how long to wait for a daemon that is starting
  std::string socket_dir;          // empty: $FASTRESTART_SOCKET_DIR, else the default
  std::string device = "host";     // "host" | "host:<name>" | "cuda:<ordinal>"
};

// What the daemon said when it granted the lease.
struct ArenaLease {
  bool created = false;           // new, zero-filled memory (first lease, or a size change)
  bool resized = false;           // the daemon dropped an arena of previous_bytes for this one
  uint64_t previous_bytes = 0;
  int64_t previous_holder_pid = -1;  // whose exit the lease waited for; -1: none
  double waited_s = 0;            // the wait for that exit
  uint64_t leases = 0;            // leases of this arena so far, this one included
  uint64_t generation = 0;        // names this lease (1 for a new arena)
  double seconds = 0;             // swap_in()'s own time: connect, lease (with its wait), map
};

class Arena {
 public:
  virtual ~Arena() = default;  // unmaps (placeholder or arena) and frees the range
  virtual void* base() const = 0;         // fixed for the Arena's life
  virtual uint64_t bytes() const = 0;     // the range's size (>= ArenaOptions::bytes)
  virtual bool leased() const = 0;        // false: the placeholder backs the range, or nothing (unmapped())
  virtual uint64_t placeholder_bytes() const = 0;  // the placeholder's memory; 0 once leased or unmapped
  // Leases the arena and maps it over the range at base(). Errc::kBusy when already leased. After unmap()
  // it leases again (this process still holds the lease: granted at once; a process restored from a
  // snapshot is another process: granted once the dumped one has exited) and maps at the same address.
  virtual Result<ArenaLease> swap_in() = 0;
  // For a snapshot (docs/snapshot.md, "Snapshots without the KV cache"): unmaps the arena (or the
  // placeholder) and keeps the range reserved with nothing behind it, so that the checkpoint holds none of
  // it. Nothing may touch the range until swap_in() (a read or write faults); device work queued over it
  // is waited for first. The lease is not given back: it ends with the process, as always.
  virtual Status unmap() = 0;
  virtual bool unmapped() const = 0;
  virtual const ArenaOptions& options() const = 0;
  virtual std::string daemon_socket() const = 0;            // the daemon swap_in() asks
  virtual std::optional<ArenaLease> last_lease() const = 0;  // what the last swap_in() was granted
};

// An arena the daemon holds, as its status lists it (docs/protocol.md, "status").
struct ArenaInfo {
  uint64_t bytes = 0;        // the arena's size: reserve exactly this many bytes to lease it unchanged
  int64_t holder_pid = -1;   // the process holding its lease; -1: none
  uint64_t leases = 0;
  uint64_t waiting = 0;      // leases waiting now for the holder's exit
};

// Asks the daemon of options.device for the arena options.name (a status request: nothing is leased or
// made; options.bytes and wait_s are not used). std::nullopt: the daemon holds no arena of that name. An
// engine that would rather take the arena as it is than resize it (a standby sizing its KV cache before
// the live engine exits) asks this first. Errors: no daemon (Errc::kNotFound), a malformed status.
Result<std::optional<ArenaInfo>> find_arena(const ArenaOptions& options);

// Reserves the range and backs it with the placeholder; the daemon is not asked yet.
Result<std::unique_ptr<Arena>> reserve_arena(const ArenaOptions& options);
// reserve_arena(), then swap_in(): the arena's memory at once.
Result<std::unique_ptr<Arena>> lease_arena(const ArenaOptions& options, ArenaLease* lease = nullptr);

// The engine's arena line (docs/supervisor.md, "The engine's arena line"): what an engine prints on its
// output, once as it starts and again after each lease, so that fastrestartd records what came of its KV
// arena. This is the one writer of that line (the tiny engine and the Python binding use it); fastrestartd
// reads it. No trailing newline; a logger's prefix before it is fine.
//   fastrestart-arena: leased name=kv bytes=107374182400 waited_s=0.081000 swap_s=0.003000 generation=4
// arena_line(): the leased line for `arena`'s last lease (its name, its range's bytes, the lease's wait,
// swap_in()'s time and generation); empty when it was never leased.
std::string arena_line(const Arena& arena);
// The fallback line: the engine allocates its KV cache itself, because of `reason`, which is made one line
// (whitespace runs become one space), cut at 512 bytes (on a UTF-8 character's start) and quoted with `"`
// and `\` escaped.
//   fastrestart-arena: fallback reason="arena_lease.wait_s: arena 'kv' is still leased to pid 4321"
std::string arena_fallback_line(std::string_view reason);

}  // namespace fastrestart
