// Loads the embedded fatbin and launches its kernels.
#include "cuda/kernels.h"

#include "common/digest.h"
#include "cuda/digest_fatbin.h"

namespace fr::cuda {

namespace {
constexpr unsigned kThreads = 256;  // 64 chunks per block (4 threads per chunk); a multiple of 32
}

Result<std::unique_ptr<Kernels>> Kernels::load(CUcontext ctx) {
  FR_ASSIGN(const Driver* d, load_driver());
  ScopedContext scope(ctx);
  FR_TRY(scope.status());
  CUmodule m = nullptr;
  FR_TRY(check(d->cuModuleLoadData(&m, fr_digest_fatbin), "cuModuleLoadData(digest kernels)"));
  std::unique_ptr<Kernels> k(new Kernels(ctx, Module(ctx, m)));
  FR_TRY(check(d->cuModuleGetFunction(&k->m_chunk_xxh64, m, "fr_chunk_xxh64"), "cuModuleGetFunction(fr_chunk_xxh64)"));
  FR_TRY(check(d->cuModuleGetFunction(&k->m_write_byte, m, "fr_write_byte"), "cuModuleGetFunction(fr_write_byte)"));
  return k;
}

Result<std::vector<uint64_t>> Kernels::chunk_hashes(CUdeviceptr p, uint64_t length, CUstream stream) const {
  FR_ASSIGN(const Driver* d, load_driver());
  if (p % 8 != 0) return make_error(Errc::kInternal, "GPU digest of a pointer that is not 8-byte aligned");
  std::vector<uint64_t> hashes(digest_chunk_count(length));
  if (hashes.empty()) return hashes;
  ScopedContext scope(m_ctx);
  FR_TRY(scope.status());
  FR_ASSIGN(DeviceMemory out, alloc_device(m_ctx, hashes.size() * sizeof(uint64_t)));
  CUdeviceptr out_ptr = out.get();
  void* args[] = {&p, &length, &out_ptr};
  uint64_t threads = hashes.size() * 4;
  auto blocks = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
  FR_TRY(check(d->cuLaunchKernel(m_chunk_xxh64, blocks, 1, 1, kThreads, 1, 1, 0, stream, args, nullptr),
               "cuLaunchKernel(fr_chunk_xxh64)"));
  FR_TRY(check(d->cuStreamSynchronize(stream), "fr_chunk_xxh64"));
  FR_TRY(check(d->cuMemcpyDtoH(hashes.data(), out_ptr, hashes.size() * sizeof(uint64_t)), "cuMemcpyDtoH(chunk hashes)"));
  return hashes;
}

Result<uint64_t> Kernels::digest(CUdeviceptr p, uint64_t length, CUstream stream) const {
  FR_ASSIGN(std::vector<uint64_t> h, chunk_hashes(p, length, stream));
  return combine_chunk_hashes(h.data(), h.size());
}

Status Kernels::write_byte(CUdeviceptr p, uint8_t value, CUstream stream) const {
  FR_ASSIGN(const Driver* d, load_driver());
  ScopedContext scope(m_ctx);
  FR_TRY(scope.status());
  void* args[] = {&p, &value};
  FR_TRY(check(d->cuLaunchKernel(m_write_byte, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr),
               "cuLaunchKernel(fr_write_byte)"));
  return check(d->cuStreamSynchronize(stream), "fr_write_byte");
}

}  // namespace fr::cuda
