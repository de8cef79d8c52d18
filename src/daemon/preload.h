// Preload: read safetensors checkpoints into one pool with the pipelined reader (ARCHITECTURE.md,
// "Two ways to fill the cache").
//
// plan_preload validates every header before any data is read and lays the selected tensors out in the
// pool. run_preload then splits the pool into tasks of up to 64 MiB that `threads` readers take in turn:
// each parallel-preads its task's tensor bytes into the backend's staging buffer, hashes every 64 KiB
// chunk (common/digest.h) and submits the buffer to the pool (an async host-to-device copy on CUDA).
// Every byte placed in the pool is hashed exactly once, in the reader that read it.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "common/file_identity.h"
#include "common/safetensors.h"
#include "daemon/backend.h"
#include "daemon/store.h"
#include "protocol/messages.h"

namespace fr::daemon {

struct PreloadPlan {
  std::vector<FileIdentity> identities;     // of the files, sorted by path (the key's order)
  std::vector<SafetensorsHeader> headers;   // in the order given
  std::vector<proto::TensorSlot> slots;     // pool layout
  std::vector<std::pair<size_t, uint64_t>> sources;  // per slot: header index, absolute file offset
  uint64_t data_bytes = 0;
};

// `select`: exact tensor names to keep (empty: all). `dtype`: every kept tensor must have it.
Result<PreloadPlan> plan_preload(const std::vector<std::string>& files, const std::vector<std::string>& select,
                                 std::optional<DType> dtype);

// Tests only (docs/weightd.md): hold every read task back, so a test can observe a loading entry.
struct TestReadHold {
  int delay_ms = 0;  // sleep this long before each 64 MiB read task
  std::string gate;  // non-empty: before each read task, wait until this path exists (or the load is cancelled)
};

// Fills `pool` per `plan`; returns the content digest. Checks the files' identities again at the end so a
// file changed while it was read fails the load instead of being cached under its old identity.
Result<uint64_t> run_preload(const PreloadPlan& plan, Pool& pool, Progress& progress,
                             const std::atomic<bool>& cancel, int threads, const TestReadHold& test_hold = {});

}  // namespace fr::daemon
