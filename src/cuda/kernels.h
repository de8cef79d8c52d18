// Host side of digest_kernel.cu: the module (embedded fatbin) and typed launchers.
//
// REQUIRES for every call: the pointers belong to `ctx` (the device's primary context); calls may come
// from any thread (each launcher makes the context current for its duration). Launches go to the given
// stream (nullptr: the legacy default stream) and the functions return once their results are on the host.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/handles.h"

namespace fr::cuda {

class Kernels {
 public:
  static Result<std::unique_ptr<Kernels>> load(CUcontext ctx);

  // XXH64 (seed 0) of each 64 KiB chunk of device memory [p, p+length) (common/digest.h).
  // REQUIRES: p 8-byte aligned.
  Result<std::vector<uint64_t>> chunk_hashes(CUdeviceptr p, uint64_t length, CUstream stream) const;
  // The content digest of [p, p+length): chunk hashes combined with fr::combine_chunk_hashes.
  Result<uint64_t> digest(CUdeviceptr p, uint64_t length, CUstream stream) const;
  // *p = value from a kernel, then waits. Fails (illegal address) when p is mapped read-only; that error
  // is sticky: the context is unusable afterwards, so only a test's child process calls this on purpose.
  Status write_byte(CUdeviceptr p, uint8_t value, CUstream stream) const;

 private:
  Kernels(CUcontext ctx, Module m) : m_ctx(ctx), m_module(std::move(m)) {}
  CUcontext m_ctx;
  Module m_module;
  CUfunction m_chunk_xxh64 = nullptr;
  CUfunction m_write_byte = nullptr;
};

}  // namespace fr::cuda
