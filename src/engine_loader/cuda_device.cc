// DeviceApi for "cuda:<ordinal>": imports daemon pools (CUDA VMM POSIX fds) into this process.
//
// Everything runs in the device's primary context, the one the CUDA runtime and PyTorch use, so the
// pointers we return are usable by the engine and the engine's pointers (copy_in) by us. Calls push and
// pop that context, leaving the engine thread's current context as it was.
#include <cstring>
#include <vector>

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

// The CUDA arena range: a reserved VA range, a placeholder allocation mapped at every chunk (read-write),
// then the imported arena mapped over the whole range. Members go in reverse order: mappings, then the
// placeholder allocation, then the range.
class CudaArenaRange final : public ArenaRange {
 public:
  static Result<std::unique_ptr<ArenaRange>> make(const std::shared_ptr<cuda::Device>& dev, uint64_t bytes) {
    const uint64_t g = dev->vmm_granularity();
    const uint64_t n = std::max<uint64_t>(g, (bytes + g - 1) / g * g);
    const cuda::Driver& d = dev->driver();
    ScopedContext scope(dev->context());
    FR_TRY(scope.status());
    std::unique_ptr<CudaArenaRange> r(new CudaArenaRange(dev));
    CUdeviceptr va = 0;
    FR_TRY(check(d.cuMemAddressReserve(&va, n, g, 0, 0), "cuMemAddressReserve(arena)"));
    r->m_range = cuda::AddressRange(dev->context(), cuda::Range{va, n});
    const uint64_t chunk = placeholder_size(n, g);
    // Every mapping covers its allocation whole: the driver may refuse to map a part of one
    // (CUDA_ERROR_NOT_SUPPORTED), so a range that is no multiple of the chunk ends on a second placeholder
    // of exactly what is left.
    const uint64_t tail = n % chunk;
    FR_ASSIGN(r->m_placeholder, cuda::create_shareable(dev, chunk));
    if (tail != 0) {
      FR_ASSIGN(r->m_tail_placeholder, cuda::create_shareable(dev, tail));
    }
    for (uint64_t off = 0; off < n; off += chunk) {
      const uint64_t len = std::min(chunk, n - off);
      const cuda::Allocation& ph = len == chunk ? r->m_placeholder : r->m_tail_placeholder;
      FR_TRY(check(d.cuMemMap(va + off, len, 0, ph.get(), 0), "cuMemMap(arena placeholder)"));
      r->m_maps.emplace_back(dev->context(), cuda::Range{va + off, len});
    }
    FR_TRY(r->set_access());
    r->m_placeholder_bytes = chunk + tail;
    return std::unique_ptr<ArenaRange>(std::move(r));
  }
  ~CudaArenaRange() override {
    ScopedContext scope(m_dev->context());
    m_maps.clear();
    m_placeholder.reset();
    m_tail_placeholder.reset();
    m_range.reset();
  }

  std::byte* base() const override { return reinterpret_cast<std::byte*>(m_range.get().ptr); }
  uint64_t size() const override { return m_range.get().size; }
  uint64_t placeholder_bytes() const override { return m_swapped || m_unmapped ? 0 : m_placeholder_bytes; }
  bool swapped() const override { return m_swapped; }
  bool unmapped() const override { return m_unmapped; }

  // cuMemUnmap with the range left reserved (as for released weights): the driver's checkpoint then has
  // nothing of the arena to copy, and graphs captured over the range keep their addresses.
  Status unmap() override {
    ScopedContext scope(m_dev->context());
    FR_TRY(scope.status());
    FR_TRY(check(m_dev->driver().cuCtxSynchronize(), "cuCtxSynchronize(before the arena's unmap)"));
    m_maps.clear();
    m_placeholder.reset();
    m_tail_placeholder.reset();
    m_swapped = false;
    m_unmapped = true;
    return {};
  }

  Status swap_in(UniqueFd fd, uint64_t pool_bytes) override {
    if (m_swapped) return make_error(Errc::kBusy, "the arena is already swapped in");
    if (pool_bytes < size())
      return make_error(Errc::kInvalidArgument, "the leased arena has " + std::to_string(pool_bytes) +
                                                    " bytes, the reserved range " + std::to_string(size()));
    const cuda::Driver& d = m_dev->driver();
    ScopedContext scope(m_dev->context());
    FR_TRY(scope.status());
    FR_ASSIGN(cuda::Allocation arena, cuda::import_fd(*m_dev, fd.get()));
    // Kernels queued over the placeholder finish before its mappings go.
    FR_TRY(check(d.cuCtxSynchronize(), "cuCtxSynchronize(before the arena swap)"));
    m_maps.clear();  // cuMemUnmap of each placeholder chunk; the range stays reserved
    m_placeholder.reset();
    m_tail_placeholder.reset();
    const cuda::Range r = m_range.get();
    FR_TRY(check(d.cuMemMap(r.ptr, r.size, 0, arena.get(), 0), "cuMemMap(arena)"));
    m_maps.emplace_back(m_dev->context(), r);
    FR_TRY(set_access());
    m_swapped = true;  // `arena`'s handle goes on return: the mapping holds the memory
    m_unmapped = false;
    return {};
  }

 private:
  explicit CudaArenaRange(std::shared_ptr<cuda::Device> dev) : m_dev(std::move(dev)) {}
  Status set_access() {
    CUmemAccessDesc desc{};
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = m_dev->handle();
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return check(m_dev->driver().cuMemSetAccess(m_range.get().ptr, m_range.get().size, &desc, 1), "cuMemSetAccess(arena)");
  }

  std::shared_ptr<cuda::Device> m_dev;
  cuda::AddressRange m_range;
  cuda::Allocation m_placeholder;
  cuda::Allocation m_tail_placeholder;  // the last chunk's, when it is shorter
  std::vector<cuda::Mapping> m_maps;
  uint64_t m_placeholder_bytes = 0;
  bool m_swapped = false;
  bool m_unmapped = false;
};

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

  Result<std::unique_ptr<ArenaRange>> reserve_arena(uint64_t bytes) override {
    return CudaArenaRange::make(m_dev, bytes);
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
