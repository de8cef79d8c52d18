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
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "fastrestart/result.h"

namespace fastrestart {

using fr::Errc;
using fr::Error;
template <typename T>
using Result = fr::Result<T>;
using Status = fr::Status;

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

}  // namespace fastrestart
