// engine_loader: attach an engine to weights a fastrestart-weightd holds, or publish them for next time.
//
// Contract
// - attach() asks the daemon of this process's device for an entry matching the Key: the identities of the
//   checkpoint files (from stat(2) only; the checkpoint is never read) plus the engine's config fields.
//   On a hit the tensors are backed by ONE read-only mapping of the daemon's pool (Mode::kZeroCopy) or by
//   memory this process owns (Mode::kCopy). On a miss nothing is mapped and `reason`/`differs` say why.
// - publish() stores an engine's tensors under an IdentifiedKey: the file identities taken BEFORE the engine
//   read the files (attach() takes them and returns them in AttachResult::key; identify() takes them for an
//   engine that does not attach first). The daemon re-stats the files and refuses (Errc::kCorrupt, naming
//   the file) a publish whose files changed since: the engine keeps what it read, nothing stale is stored.
// - Daemon: Options::socket_dir, else $FASTRESTART_SOCKET_DIR, else the default directory. No socket (or a
//   refusing one) is a miss at once, unless the daemon is starting (it holds its lock): then the connect is
//   retried for connect_timeout_s.
// - Errors: with Options::fallback (the default) an absent daemon, a refused connection, a timeout or any
//   daemon-side failure is reported as a miss whose reason says what happened, never as an error; only
//   invalid arguments (a checkpoint file that cannot be stat'ed, a bad device string) are errors. With
//   fallback off every failure is an error.
// - Ownership: Weights owns the mapping (or copy). Tensor pointers stay valid while the Weights object
//   lives, also after the daemon dies or evicts the entry: the imported handle keeps the memory.
// - Threading: functions are thread-safe (each call uses its own connection); a Weights object is
//   immutable after attach and may be read from any thread.
// - Device: "host" (host backend, CPU pointers) or "cuda:<ordinal>" (the ordinal as this process sees it;
//   the daemon is found by the device's UUID and its UUID is checked against ours).
// Protocol: docs/protocol.md. C ABI: fastrestart/engine_loader_c.h.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "fastrestart/arena.h"
#include "fastrestart/result.h"

namespace fastrestart {

// Errc, Error, Result<T> and Status: fr's, as fastrestart/arena.h names them in this namespace.

enum class Mode { kZeroCopy, kCopy };

struct Options {
  Mode mode = Mode::kZeroCopy;
  bool fallback = true;
  double connect_timeout_s = 5.0;  // how long to wait for a daemon that is starting (holds its lock)
  double state_timeout_s = 300.0;  // how long to wait for a daemon that is still loading this key
  bool verify = false;             // recompute the content digest over the mapping and compare
  std::string socket_dir;          // empty: $FASTRESTART_SOCKET_DIR, else the default (docs/protocol.md)
  std::string device = "host";     // "host" | "cuda:<ordinal>"
};

struct Key {
  std::vector<std::string> files;             // checkpoint files the engine would load
  std::map<std::string, std::string> config;  // arch, dtype, quantization, tp_size, tp_rank, engine, ...
};

// One checkpoint file as stat(2) saw it (docs/protocol.md, "Key").
struct FileIdentity {
  std::string path;  // canonical (realpath)
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

// A Key whose files were identified at one moment, sorted by path. Take it before reading the files.
struct IdentifiedKey {
  std::vector<FileIdentity> files;
  std::map<std::string, std::string> config;
  std::string fingerprint() const;  // the daemon's name for it (16 hex digits)
};

// stat()s every file of `key` (never reads one). Errc::kInvalidArgument when a file cannot be stat'ed.
Result<IdentifiedKey> identify(const Key& key);

// The same for files the engine has already opened and will read through these descriptors (fds[i] is
// key.files[i]; the paths only name the files in errors): each is identified by fstat and by the path its
// descriptor leads to now, so the key is what the engine actually reads even if a symlink on the way
// (`current -> v2`, a retargeted directory or file) changes during the load. Prefer it to identify() in
// an engine that can read through descriptors (docs/engine_loader.md, "Identify what you read").
Result<IdentifiedKey> identify_fds(const Key& key, const std::vector<int>& fds);

struct Tensor {
  std::string name;
  std::string dtype;             // safetensors spelling: "BF16", "F32", ...
  size_t itemsize = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements, row-major contiguous
  void* data = nullptr;          // host pointer, or a CUDA device pointer
  uint64_t nbytes = 0;
};

struct Timings {
  double connect_s = 0, request_s = 0, map_s = 0, copy_s = 0, verify_s = 0, total_s = 0;
};

// One imported mapping of a daemon pool, as release_mapping()/reattach() report it (snapshots without the
// weights, docs/snapshot.md).
struct MappingInfo {
  std::string fingerprint, digest;
  std::string device;         // "host" | "cuda:<ordinal>"
  std::string daemon_socket;  // where the weights were (and will be) attached from
  std::string key_json;       // the Key as docs/protocol.md spells it: file identities and config
  uintptr_t base = 0;         // the address range, kept reserved while released
  uint64_t bytes = 0;
  bool mapped = true;
  double seconds = 0;         // the call's own time
};

// The attached weights. Destroying it unmaps (zero_copy) or frees (copy).
class Weights {
 public:
  virtual ~Weights() = default;
  virtual const std::vector<Tensor>& tensors() const = 0;
  virtual const Tensor* find(const std::string& name) const = 0;
  virtual Mode mode() const = 0;
  virtual bool on_cuda() const = 0;
  virtual uint64_t pool_bytes() const = 0;
  virtual std::string fingerprint() const = 0;
  virtual std::string digest() const = 0;  // 16 hex digits, as the daemon recorded it

  // Snapshots without the weights (docs/snapshot.md). release_mapping() unmaps the daemon's pool but keeps
  // its address range reserved: the tensors' pointers stay the same and must not be read until reattach(),
  // which attaches again with the same key and options and maps the daemon's entry at the same address; it
  // fails (and stays released) when the entry is gone or is other weights (fingerprint, digest, layout).
  // Both are idempotent. Copy mode holds no imported memory: Errc::kUnsupported. Not thread-safe with
  // readers of the tensors: the caller stops them first (SnapshotAgent's quiesce hook).
  virtual Result<MappingInfo> release_mapping() { return Error{Errc::kUnsupported, "these weights cannot be released"}; }
  virtual Result<MappingInfo> reattach() { return Error{Errc::kUnsupported, "these weights cannot be re-attached"}; }
};

struct AttachResult {
  bool hit = false;
  IdentifiedKey key;                // the identities this attach asked for: publish under it after a miss
  std::string reason;               // on a miss: one sentence
  std::vector<std::string> differs;  // on a miss against a near entry: "files[0].ctime_ns", "config.dtype"
  std::shared_ptr<Weights> weights;  // set on a hit
  std::string daemon_gpu_uuid;
  Timings timings;
};

Result<AttachResult> attach(const Key& key, const Options& options);  // identify(key), then attach it
Result<AttachResult> attach(const IdentifiedKey& key, const Options& options);

struct PublishTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // host pointer ("host") or device pointer ("cuda:N"); contiguous
};

struct PublishResult {
  std::string fingerprint;
  std::string digest;
  uint64_t bytes = 0;
  double seconds = 0;
};

// Copies the tensors into a new daemon pool under `key`, so the next attach with this key hits. `key` must
// have been identified before the tensors' bytes were read from its files (AttachResult::key of the miss,
// or identify() before the load); a file changed since makes the daemon refuse with Errc::kCorrupt.
// Errors always (fallback does not apply: a publisher can decide to ignore them).
Result<PublishResult> publish(const IdentifiedKey& key, std::span<const PublishTensor> tensors, const Options& options);

// The socket path of the daemon serving `device` under `socket_dir` (empty: $FASTRESTART_SOCKET_DIR, else
// the default).
Result<std::string> daemon_socket_path(const std::string& device, const std::string& socket_dir);

// ---- The snapshot exchange (docs/snapshot.md, "The prepare/resume exchange") ----
//
// fastrestartd gives a snapshottable engine in zero_copy mode a socket path in $FASTRESTART_SNAPSHOT_SOCKET.
// The engine serves the exchange there: before a dump the snapshot helper asks it to `prepare` (quiesce,
// drop what it can rebuild, release its mappings of the daemon's pools), after the restore (or a failed
// dump) to `resume` (re-attach at the same addresses, serve again). An engine that does not serve it cannot
// be snapshotted in zero_copy.
inline constexpr const char* kSnapshotSocketEnv = "FASTRESTART_SNAPSHOT_SOCKET";

struct SnapshotHooks {
  // Before the release: stop reading the weights (wait for work in flight, hold new work back) and drop
  // what can be rebuilt (allocator caches, a KV cache). An error refuses the prepare (nothing released).
  std::function<Status()> quiesce;
  // After the re-attach: rebuild what quiesce dropped, serve again.
  std::function<Status()> resume;
};

// The exchange server: one thread, one connection at a time, one request line and one reply line each.
class SnapshotAgent {
 public:
  // Listens on `socket_path` (empty: $FASTRESTART_SNAPSHOT_SOCKET) for `weights` (zero_copy ones are
  // released; others are reported and left alone) and `arenas` (KV arenas, fastrestart/arena.h: unmapped
  // after the weights, leased and mapped again at the same address before the resume hook). Returns nullptr
  // when no path is given and the variable is unset or empty: the engine is not asked to take part.
  static Result<std::unique_ptr<SnapshotAgent>> start(std::vector<std::shared_ptr<Weights>> weights, SnapshotHooks hooks,
                                                      const std::string& socket_path = "",
                                                      std::vector<std::shared_ptr<Arena>> arenas = {});
  virtual ~SnapshotAgent() = default;  // stops the thread, closes and removes the socket
  virtual std::string socket_path() const = 0;
  virtual bool prepared() const = 0;   // between a prepare and its resume
};

}  // namespace fastrestart
