// Where a weight daemon keeps pools: host memory (memfd) or GPU memory (CUDA VMM). ARCHITECTURE.md, "Design decisions".
//
// A Pool is one shareable allocation holding one entry's tensors. The daemon fills it through Uploaders
// (one per reader thread) or lets a publisher fill it through a shared descriptor, then seals it and hands
// read-only descriptors to engines. Dropping the Pool drops only the daemon's reference: an engine that
// imported the descriptor keeps the memory alive (docs/protocol.md, "evict").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/fd.h"
#include "common/result.h"

namespace fr::daemon {

// Copies host bytes into a pool. Not thread-safe: one per reader thread.
class Uploader {
 public:
  virtual ~Uploader() = default;
  // A host buffer of at least `n` bytes (n <= max_chunk()) to fill with the pool bytes [offset, offset+n).
  // It stays valid until submit(). On the host backend it is the pool itself.
  virtual Result<std::byte*> acquire(uint64_t offset, size_t n) = 0;
  // Starts moving the acquired buffer to the pool (may return before the copy completes).
  virtual Status submit(uint64_t offset, size_t n) = 0;
  // Waits for every submitted copy.
  virtual Status finish() = 0;
  virtual size_t max_chunk() const = 0;
  // Copies file bytes [file_offset, file_offset+n) straight from the page cache into the pool at
  // `offset`, without a CPU copy (CUDA: the file's pages are registered read-only and DMA'd). Returns
  // false, having done nothing, when the backend cannot; the caller then stages the bytes itself.
  virtual Result<bool> upload_file_range(int fd, uint64_t file_offset, uint64_t offset, size_t n) {
    (void)fd, (void)file_offset, (void)offset, (void)n;
    return false;
  }
};

class Pool {
 public:
  virtual ~Pool() = default;
  virtual uint64_t size() const = 0;  // bytes allocated (>= what was asked, rounded to granularity)
  // A new descriptor for a client. Before seal() it grants write access (publish); after, read only.
  virtual Result<UniqueFd> share_fd() = 0;
  virtual Result<std::unique_ptr<Uploader>> make_uploader() = 0;
  // Makes the pool immutable (host: F_SEAL_WRITE|F_SEAL_GROW|F_SEAL_SHRINK; CUDA: nothing to seal, importers
  // map read-only). Fails while a writable mapping of it exists anywhere (host).
  virtual Status seal() = 0;
  // For a KV arena, at its creation: fixes the pool's size and forbids further seals, so no holder can
  // shrink the memory under another (SIGBUS) or seal it against every later lease (host: F_SEAL_SHRINK|
  // F_SEAL_GROW|F_SEAL_SEAL; CUDA: nothing, a VMM allocation's size is fixed and its handle has no seals).
  virtual Status fix_size() = 0;
  // For a KV arena whose next holder runs as another uid: every byte reads as zero afterwards (host: the
  // memfd's pages are punched out, freeing them; CUDA: cuMemsetD8 over the daemon's mapping, synchronized).
  // REQUIRES: no process writes the pool meanwhile (its holder has exited).
  virtual Status zero() = 0;
  // Recomputes the content digest (common/digest.h) of [0, data_bytes): CPU for host, GPU kernel for CUDA.
  virtual Result<uint64_t> digest(uint64_t data_bytes) = 0;
  // True when digest() is cheap (a GPU kernel at HBM speed): the preloader then hashes the pool once it
  // is filled instead of hashing in the reader threads, which saves a pass over host memory.
  virtual bool digest_on_device() const { return false; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;      // "host" | "cuda"
  virtual std::string gpu_uuid() const = 0;  // "host" for the host backend
  virtual std::string gpu_name() const = 0;
  // A zero-filled pool of at least `bytes`.
  virtual Result<std::unique_ptr<Pool>> allocate(uint64_t bytes) = 0;
};

// `device` empty: the one host daemon ("host"); else the host device of that name ("host-<device>",
// common/host_device.h), one of several standing for GPUs in tests.
Result<std::unique_ptr<Backend>> make_host_backend(const std::string& device = "");
// Opens the CUDA driver (dlopen), selects the device by index or "GPU-<uuid>" and creates a context.
// Errc::kCuda with "no CUDA driver" / "no GPU" / "unknown GPU" messages; Errc::kUnsupported when built
// without CUDA.
Result<std::unique_ptr<Backend>> make_cuda_backend(const std::string& gpu);

}  // namespace fr::daemon
