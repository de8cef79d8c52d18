// DeviceApi for "cuda:<ordinal>": imports daemon pools (CUDA VMM POSIX fds) into this process.
//
// Everything runs in the device's primary context, the one the CUDA runtime and PyTorch use, so the
// pointers we return are usable by the engine and the engine's pointers (copy_in) by us. Calls push and
// pop that context, leaving the engine thread's current context as it was.
#include <cstring>

#include "cuda/device.h"
#include "cuda/handles.h"
#include "cuda/kernels.h"
#include "cuda/vmm.h"
#include "engine_loader/device.h"

namespace fr::loader {
namespace {

using cuda::check;
using cuda::ScopedContext;

// An imported pool, mapped once.
class CudaMappedPool final : public MappedPool {
 public:
  CudaMappedPool(std::unique_ptr<cuda::MappedRange> m, cuda::Access access) : m_map(std::move(m)), m_access(access) {}
  std::byte* base() const override { return reinterpret_cast<std::byte*>(m_map->ptr()); }
  uint64_t size() const override { return m_map->size(); }

  // cuMemUnmap with the VA range kept reserved: the driver can then checkpoint the process (it cannot
  // checkpoint imported memory), and remap() maps the daemon's new export at the same address, so
  // tensors, CUDA graphs and compiled kernels keep their pointers.
  Status release() override { return cuda::unmap_keeping_range(*m_map); }
  Status remap(UniqueFd fd) override {
    FR_ASSIGN(cuda::Allocation alloc, cuda::import_fd(*m_map->device, fd.get()));
    return cuda::remap_in_range(*m_map, alloc, m_access);
  }
  bool released() const override { return !m_map->mapping.valid(); }

 private:
  std::unique_ptr<cuda::MappedRange> m_map;
  cuda::Access m_access;
};

// Device memory this process owns (copy mode).
class CudaCopy final : public MappedPool {
 public:
  CudaCopy(std::shared_ptr<cuda::Device> dev, cuda::DeviceMemory mem, uint64_t size)
      : m_dev(std::move(dev)), m_mem(std::move(mem)), m_size(size) {}
  ~CudaCopy() override { m_mem.reset(); }  // before m_dev, which holds the context
  std::byte* base() const override { return reinterpret_cast<std::byte*>(m_mem.get()); }
  uint64_t size() const override { return m_size; }

 private:
  std::shared_ptr<cuda::Device> m_dev;
  cuda::DeviceMemory m_mem;
  uint64_t m_size;
};

CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

class CudaDevice final : public DeviceApi {
 public:
  CudaDevice(std::shared_ptr<cuda::Device> dev, cuda::Stream s) : m_dev(std::move(dev)), m_stream(std::move(s)) {}
  ~CudaDevice() override { (void)sync(); }

  bool is_cuda() const override { return true; }
  std::string gpu_uuid() const override { return m_dev->uuid(); }

  Result<std::unique_ptr<MappedPool>> map_read_only(UniqueFd fd, uint64_t pool_bytes) override {
    return map(std::move(fd), pool_bytes, cuda::Access::kReadOnly);
  }

  Result<std::unique_ptr<MappedPool>> map_writable(UniqueFd fd, uint64_t pool_bytes) override {
    return map(std::move(fd), pool_bytes, cuda::Access::kReadWrite);
  }

  Result<std::unique_ptr<MappedPool>> copy_of(const MappedPool& src, uint64_t data_bytes) override {
    if (data_bytes > src.size()) return make_error(Errc::kInternal, "copy past the end of the pool");
    FR_ASSIGN(cuda::DeviceMemory mem, cuda::alloc_device(m_dev->context(), std::max<uint64_t>(data_bytes, 1)));
    ScopedContext scope(m_dev->context());
    FR_TRY(scope.status());
    const cuda::Driver& d = m_dev->driver();
    FR_TRY(check(d.cuMemcpyDtoD(mem.get(), dptr(src.base()), data_bytes), "cuMemcpyDtoD(pool copy)"));
    // Device-to-device copies return before they finish; the caller may unmap the source next.
    FR_TRY(check(d.cuStreamSynchronize(nullptr), "cuMemcpyDtoD(pool copy)"));
    return std::unique_ptr<MappedPool>(new CudaCopy(m_dev, std::move(mem), data_bytes));
  }

  Result<uint64_t> digest(const MappedPool& p, uint64_t data_bytes) override {
    if (data_bytes > p.size()) return make_error(Errc::kInternal, "digest past the end of the pool");
    FR_ASSIGN(const cuda::Kernels* k, m_dev->kernels());
    FR_TRY(sync());  // publish copies still in flight on our stream land first
    return k->digest(dptr(p.base()), data_bytes, m_stream.get());
  }

  Status copy_in(MappedPool& dst, uint64_t offset, const void* src, uint64_t n) override {
    if (offset > dst.size() || n > dst.size() - offset)
      return make_error(Errc::kInvalidArgument, "copy of " + std::to_string(n) + " bytes at offset " +
                                                    std::to_string(offset) + " past the end of the pool");
    const cuda::Driver& d = m_dev->driver();
    ScopedContext scope(m_dev->context());
    FR_TRY(scope.status());
    if (!m_fenced) {
      // The engine produced `src` on streams of its own that ours does not follow: wait for all work in
      // the context once per batch of copies (reset by sync()).
      FR_TRY(check(d.cuCtxSynchronize(), "cuCtxSynchronize(before publish copies)"));
      m_fenced = true;
    }
    // Device memory and pinned host memory are known to the driver (unified addressing) and go through
    // cuMemcpyAsync; plain pageable host memory is not, and needs the host-to-device call.
    CUmemorytype type{};
    if (d.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dptr(src)) != CUDA_SUCCESS)
      return check(d.cuMemcpyHtoDAsync(dptr(dst.base()) + offset, src, n, m_stream.get()), "cuMemcpyHtoDAsync(publish)");
    return check(d.cuMemcpyAsync(dptr(dst.base()) + offset, dptr(src), n, m_stream.get()), "cuMemcpyAsync(publish)");
  }

  Status sync() override {
    m_fenced = false;
    ScopedContext scope(m_dev->context());
    FR_TRY(scope.status());
    return check(m_dev->driver().cuStreamSynchronize(m_stream.get()), "cuStreamSynchronize(publish copies)");
  }

 private:
  Result<std::unique_ptr<MappedPool>> map(UniqueFd fd, uint64_t pool_bytes, cuda::Access access) {
    FR_ASSIGN(cuda::Allocation alloc, cuda::import_fd(*m_dev, fd.get()));
    FR_ASSIGN(auto m, cuda::map_allocation(m_dev, alloc, pool_bytes, access));
    // `alloc` is released on return and `fd` closed: the mapping holds the memory from now on.
    return std::unique_ptr<MappedPool>(new CudaMappedPool(std::move(m), access));
  }

  std::shared_ptr<cuda::Device> m_dev;
  cuda::Stream m_stream;
  bool m_fenced = false;
};

}  // namespace

Result<std::unique_ptr<DeviceApi>> make_cuda_device(int ordinal) {
  FR_ASSIGN(auto dev, cuda::Device::open_ordinal(ordinal));
  FR_ASSIGN(cuda::Stream s, cuda::create_stream(dev->context()));
  return std::unique_ptr<DeviceApi>(new CudaDevice(std::move(dev), std::move(s)));
}

}  // namespace fr::loader
