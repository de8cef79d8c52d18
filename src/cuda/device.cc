// Device selection (ordinal or UUID), primary context retain/release, lazy kernel loading.
#include "cuda/device.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "cuda/handles.h"
#include "cuda/kernels.h"

namespace fr::cuda {

std::string format_uuid(const CUuuid& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char s[64];
  std::snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return s;
}

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

Result<std::string> uuid_of(const Driver& d, CUdevice dev) {
  CUuuid u{};
  FR_TRY(check(d.cuDeviceGetUuid(&u, dev), "cuDeviceGetUuid"));
  return format_uuid(u);
}

}  // namespace

Result<std::shared_ptr<Device>> Device::open(const std::string& spec) {
  if (spec.empty()) return make_error(Errc::kInvalidArgument, "empty GPU name (want an ordinal or GPU-<uuid>)");
  if (std::all_of(spec.begin(), spec.end(), [](unsigned char c) { return std::isdigit(c); })) {
    if (spec.size() > 4) return make_error(Errc::kInvalidArgument, "GPU ordinal out of range: " + spec);
    return open_ordinal(std::stoi(spec));
  }
  if (lower(spec).rfind("gpu-", 0) != 0)
    return make_error(Errc::kInvalidArgument, "bad GPU name '" + spec + "' (want an ordinal or GPU-<uuid>)");
  FR_ASSIGN(const Driver* d, load_driver());
  int n = 0;
  FR_TRY(check(d->cuDeviceGetCount(&n), "cuDeviceGetCount"));
  for (int i = 0; i < n; ++i) {
    CUdevice dev = 0;
    FR_TRY(check(d->cuDeviceGet(&dev, i), "cuDeviceGet"));
    FR_ASSIGN(std::string u, uuid_of(*d, dev));
    if (lower(u) == lower(spec)) return open_ordinal(i);
  }
  return make_error(Errc::kCuda, "unknown GPU " + spec + ": none of the " + std::to_string(n) +
                                     " visible devices has this UUID (check CUDA_VISIBLE_DEVICES)");
}

Result<std::shared_ptr<Device>> Device::open_ordinal(int ordinal) {
  FR_ASSIGN(const Driver* d, load_driver());
  int n = 0;
  FR_TRY(check(d->cuDeviceGetCount(&n), "cuDeviceGetCount"));
  if (n == 0) return make_error(Errc::kCuda, "no GPU (the CUDA driver sees no device)");
  if (ordinal < 0 || ordinal >= n)
    return make_error(Errc::kCuda, "no GPU " + std::to_string(ordinal) + ": " + std::to_string(n) + " visible");
  std::shared_ptr<Device> dev(new Device());
  dev->m_driver = d;
  dev->m_ordinal = ordinal;
  FR_TRY(check(d->cuDeviceGet(&dev->m_dev, ordinal), "cuDeviceGet"));
  FR_ASSIGN(dev->m_uuid, uuid_of(*d, dev->m_dev));
  char name[256] = {};
  FR_TRY(check(d->cuDeviceGetName(name, sizeof name - 1, dev->m_dev), "cuDeviceGetName"));
  dev->m_name = name;
  size_t total = 0;
  FR_TRY(check(d->cuDeviceTotalMem(&total, dev->m_dev), "cuDeviceTotalMem"));
  dev->m_total = total;
  int vmm = 0, posix = 0;
  FR_TRY(check(d->cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev->m_dev),
               "cuDeviceGetAttribute"));
  FR_TRY(check(d->cuDeviceGetAttribute(&posix, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                       dev->m_dev),
               "cuDeviceGetAttribute"));
  if (!vmm || !posix)
    return make_error(Errc::kCuda, "GPU " + dev->m_uuid + " lacks VMM with POSIX fd handles (needed for pools)");
  // Retained last, so the destructor releases it only when we got it.
  FR_TRY(check(d->cuDevicePrimaryCtxRetain(&dev->m_ctx, dev->m_dev), "cuDevicePrimaryCtxRetain"));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev->m_dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t g = 0;
  FR_TRY(check(d->cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
               "cuMemGetAllocationGranularity"));
  dev->m_granularity = g;
  return dev;
}

Device::~Device() {
  // The module lives in the primary context: unload it before the last reference to the context goes.
  m_kernels.reset();
  if (m_ctx != nullptr) m_driver->cuDevicePrimaryCtxRelease(m_dev);
}

Result<const Kernels*> Device::kernels() {
  std::lock_guard lock(m_mu);
  if (!m_kernels) {
    FR_ASSIGN(m_kernels, Kernels::load(m_ctx));
  }
  return m_kernels.get();
}

}  // namespace fr::cuda
