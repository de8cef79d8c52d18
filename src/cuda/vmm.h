// CUDA VMM pools shared by file descriptor (ARCHITECTURE.md).
//
// The daemon creates one allocation per entry with a POSIX-fd handle type and exports a fresh fd per
// client; a client imports the fd, reserves a VA range and maps the whole allocation once, read-only or
// read-write. A mapping holds its own reference to the physical memory, so the allocation handle can be
// released right after mapping and the memory lives until the last mapping anywhere goes away, whatever
// happens to the exporter.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>

#include "common/fd.h"
#include "cuda/device.h"
#include "cuda/handles.h"

namespace fr::cuda {

enum class Access { kReadOnly, kReadWrite };

// A mapped range; unmaps, then frees the range, on destruction (members are destroyed in that order).
struct MappedRange {
  std::shared_ptr<Device> device;  // keeps the context alive while mapped
  AddressRange range;
  Mapping mapping;
  CUdeviceptr ptr() const { return range.get().ptr; }
  uint64_t size() const { return range.get().size; }
};

// A new shareable allocation of `bytes` (REQUIRES: a multiple of dev.vmm_granularity()) on `dev`.
Result<Allocation> create_shareable(const std::shared_ptr<Device>& dev, uint64_t bytes);
// A new descriptor (close-on-exec) for `alloc`; each call returns a new one the caller owns.
Result<UniqueFd> export_fd(const Device& dev, const Allocation& alloc);
// Imports a descriptor made by export_fd (in any process). The fd may be closed afterwards.
Result<Allocation> import_fd(const Device& dev, int fd);
// Reserves `bytes` (the allocation's full size) of VA and maps `alloc` there with `access` for `dev`.
Result<std::unique_ptr<MappedRange>> map_allocation(const std::shared_ptr<Device>& dev, const Allocation& alloc,
                                                    uint64_t bytes, Access access);
// Snapshots without the weights: unmaps `m`'s memory but keeps its VA range reserved (the driver cannot
// checkpoint imported memory; a range with nothing mapped costs it nothing).
Status unmap_keeping_range(MappedRange& m);
// Maps `alloc` (the same size) into `m`'s reserved range again, at the same address.
Status remap_in_range(MappedRange& m, const Allocation& alloc, Access access);

}  // namespace fr::cuda
