// VMM create / export / import / map, each CUresult turned into an Error naming the call.
#include "cuda/vmm.h"

#include <fcntl.h>

#include <cstdint>

namespace fr::cuda {

Result<Allocation> create_shareable(const std::shared_ptr<Device>& dev, uint64_t bytes) {
  const Driver& d = dev->driver();
  if (bytes == 0 || bytes % dev->vmm_granularity() != 0)
    return make_error(Errc::kInternal, "VMM allocation size not a multiple of the granularity");
  ScopedContext scope(dev->context());
  FR_TRY(scope.status());
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev->handle();
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h = 0;
  CUresult r = d.cuMemCreate(&h, bytes, &prop, 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    return make_error(Errc::kCuda, "cuMemCreate: out of GPU memory for a pool of " + std::to_string(bytes) +
                                       " bytes on " + dev->uuid());
  FR_TRY(check(r, "cuMemCreate"));
  return Allocation(dev->context(), h);
}

Result<UniqueFd> export_fd(const Device& dev, const Allocation& alloc) {
  ScopedContext scope(dev.context());
  FR_TRY(scope.status());
  int fd = -1;
  FR_TRY(check(dev.driver().cuMemExportToShareableHandle(&fd, alloc.get(), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
               "cuMemExportToShareableHandle"));
  UniqueFd owned(fd);
  // The driver does not set close-on-exec; without it every child we spawn would inherit the pool.
  if (::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) return sys_error("set FD_CLOEXEC on an exported pool fd");
  return owned;
}

Result<Allocation> import_fd(const Device& dev, int fd) {
  ScopedContext scope(dev.context());
  FR_TRY(scope.status());
  CUmemGenericAllocationHandle h = 0;
  // The API takes the descriptor itself, passed in the pointer-sized argument.
  void* os_handle = reinterpret_cast<void*>(static_cast<intptr_t>(fd));
  FR_TRY(check(dev.driver().cuMemImportFromShareableHandle(&h, os_handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
               "cuMemImportFromShareableHandle"));
  return Allocation(dev.context(), h);
}

namespace {

Status map_into(const Device& dev, CUdeviceptr va, uint64_t bytes, const Allocation& alloc, Access access, Mapping* out) {
  const Driver& d = dev.driver();
  FR_TRY(check(d.cuMemMap(va, bytes, 0, alloc.get(), 0), "cuMemMap"));
  *out = Mapping(dev.context(), Range{va, bytes});
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = dev.handle();
  desc.flags = access == Access::kReadOnly ? CU_MEM_ACCESS_FLAGS_PROT_READ : CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return check(d.cuMemSetAccess(va, bytes, &desc, 1), "cuMemSetAccess");
}

}  // namespace

Status unmap_keeping_range(MappedRange& m) {
  if (!m.mapping.valid()) return {};
  ScopedContext scope(m.device->context());
  FR_TRY(scope.status());
  // Work still queued may read the pool: let it finish before the memory goes.
  FR_TRY(check(m.device->driver().cuCtxSynchronize(), "cuCtxSynchronize(before releasing the pool)"));
  m.mapping.reset();  // cuMemUnmap; the AddressRange stays reserved
  return {};
}

Status remap_in_range(MappedRange& m, const Allocation& alloc, Access access) {
  if (m.mapping.valid()) return make_error(Errc::kInternal, "remap of a pool that is still mapped");
  ScopedContext scope(m.device->context());
  FR_TRY(scope.status());
  return map_into(*m.device, m.ptr(), m.size(), alloc, access, &m.mapping);
}

Result<std::unique_ptr<MappedRange>> map_allocation(const std::shared_ptr<Device>& dev, const Allocation& alloc,
                                                    uint64_t bytes, Access access) {
  const Driver& d = dev->driver();
  if (bytes == 0 || bytes % dev->vmm_granularity() != 0)
    return make_error(Errc::kInvalidArgument, "pool size " + std::to_string(bytes) +
                                                  " is not a multiple of the VMM granularity");
  ScopedContext scope(dev->context());
  FR_TRY(scope.status());
  auto m = std::make_unique<MappedRange>();
  m->device = dev;
  CUdeviceptr va = 0;
  FR_TRY(check(d.cuMemAddressReserve(&va, bytes, 0, 0, 0), "cuMemAddressReserve"));
  m->range = AddressRange(dev->context(), Range{va, bytes});
  FR_TRY(map_into(*dev, va, bytes, alloc, access, &m->mapping));
  return m;
}

}  // namespace fr::cuda
