// The host device: pools are memfds mapped with mmap(2).
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "common/digest.h"
#include "common/host_device.h"
#include "common/mapping.h"
#include "common/private_dir.h"
#include "engine_loader/device.h"

namespace fr::loader {
namespace {

class MmapPool final : public MappedPool {
 public:
  MmapPool(Mapping m, int prot) : m_map(std::move(m)), m_prot(prot) {}
  std::byte* base() const override { return m_map.bytes(); }
  uint64_t size() const override { return m_map.size(); }

  // An anonymous PROT_NONE mapping replaces the memfd's in one call (MAP_FIXED): the range stays ours,
  // and the memfd is no longer referenced by this process (its descriptor was closed after mapping).
  Status release() override {
    if (m_released) return {};
    if (::mmap(m_map.data(), m_map.size(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) ==
        MAP_FAILED)
      return sys_error("mmap(PROT_NONE) over the weight pool");
    m_released = true;
    return {};
  }
  Status remap(UniqueFd fd) override {
    struct stat st{};
    if (::fstat(fd.get(), &st) != 0) return sys_error("fstat(weight pool)");
    if (static_cast<uint64_t>(st.st_size) < m_map.size())
      return make_error(Errc::kInvalidArgument, "the new pool has " + std::to_string(st.st_size) + " bytes, the mapping " +
                                                    std::to_string(m_map.size()));
    if (::mmap(m_map.data(), m_map.size(), m_prot, MAP_SHARED | MAP_FIXED, fd.get(), 0) == MAP_FAILED)
      return sys_error("mmap(MAP_FIXED) of the weight pool at its old address");
    m_released = false;
    return {};
  }
  bool released() const override { return m_released; }

 private:
  Mapping m_map;
  int m_prot;
  bool m_released = false;
};

// The host arena range: PROT_NONE reservation, then a placeholder memfd mapped MAP_FIXED at every chunk,
// then the leased memfd MAP_FIXED over the whole range (one call replaces every placeholder mapping).
class HostArenaRange final : public ArenaRange {
 public:
  static Result<std::unique_ptr<ArenaRange>> make(uint64_t bytes) {
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t n = std::max<uint64_t>(page, (bytes + page - 1) / page * page);
    void* base = ::mmap(nullptr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) return sys_error("reserve " + std::to_string(n) + " bytes of address space for the arena");
    std::unique_ptr<HostArenaRange> r(new HostArenaRange(static_cast<std::byte*>(base), n));
    const uint64_t chunk = placeholder_size(n, page);
    UniqueFd ph(::memfd_create("fastrestart-arena-placeholder", MFD_CLOEXEC));
    if (!ph) return sys_error("memfd_create(arena placeholder)");
    if (::ftruncate(ph.get(), static_cast<off_t>(chunk)) != 0) return sys_error("size the arena placeholder");
    for (uint64_t off = 0; off < n; off += chunk) {
      const uint64_t len = std::min(chunk, n - off);
      if (::mmap(r->m_base + off, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, ph.get(), 0) == MAP_FAILED)
        return sys_error("map the arena placeholder at offset " + std::to_string(off));
    }
    r->m_placeholder = chunk;
    return std::unique_ptr<ArenaRange>(std::move(r));
  }
  ~HostArenaRange() override { ::munmap(m_base, m_size); }

  std::byte* base() const override { return m_base; }
  uint64_t size() const override { return m_size; }
  uint64_t placeholder_bytes() const override { return m_swapped || m_unmapped ? 0 : m_placeholder; }
  bool swapped() const override { return m_swapped; }
  bool unmapped() const override { return m_unmapped; }

  // PROT_NONE over the whole range, as at the reservation: the memfd's (or placeholder's) pages go with
  // their last mapping here, and a read or write of the range faults until the next swap_in().
  Status unmap() override {
    if (::mmap(m_base, m_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED)
      return sys_error("mmap(PROT_NONE, MAP_FIXED) over the arena's range");
    m_swapped = false;
    m_unmapped = true;
    return {};
  }

  Status swap_in(UniqueFd fd, uint64_t pool_bytes) override {
    if (m_swapped) return make_error(Errc::kBusy, "the arena is already swapped in");
    struct stat st{};
    if (::fstat(fd.get(), &st) != 0) return sys_error("fstat(arena)");
    if (pool_bytes < m_size || static_cast<uint64_t>(st.st_size) < m_size)
      return make_error(Errc::kInvalidArgument, "the leased arena has " + std::to_string(st.st_size) +
                                                    " bytes, the reserved range " + std::to_string(m_size));
    if (::mmap(m_base, m_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd.get(), 0) == MAP_FAILED)
      return sys_error("mmap(MAP_FIXED) of the leased arena over its placeholder");
    m_swapped = true;  // the placeholder memfd went with its last mapping
    m_unmapped = false;
    // The lease is this process's: a child it forks must not keep the arena mapped after this process
    // exits (the daemon grants the next lease on this process's exit alone). exec drops mappings anyway,
    // and the descriptor, received close-on-exec, is closed on return.
    if (::madvise(m_base, m_size, MADV_DONTFORK) != 0) return sys_error("madvise(MADV_DONTFORK) on the leased arena");
    m_unmapped = false;
    return {};
  }

 private:
  HostArenaRange(std::byte* base, uint64_t n) : m_base(base), m_size(n) {}
  std::byte* m_base;
  uint64_t m_size;
  uint64_t m_placeholder = 0;
  bool m_swapped = false;
  bool m_unmapped = false;
};

class HeapPool final : public MappedPool {
 public:
  explicit HeapPool(uint64_t n) : m_p(static_cast<std::byte*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096))), m_n(n) {}
  ~HeapPool() override { std::free(m_p); }
  std::byte* base() const override { return m_p; }
  uint64_t size() const override { return m_n; }

 private:
  std::byte* m_p;
  uint64_t m_n;
};

class HostDevice final : public DeviceApi {
 public:
  explicit HostDevice(std::string uuid) : m_uuid(std::move(uuid)) {}
  bool is_cuda() const override { return false; }
  std::string gpu_uuid() const override { return m_uuid; }

  Result<std::unique_ptr<MappedPool>> map_read_only(UniqueFd fd, uint64_t n) override {
    FR_ASSIGN(Mapping m, Mapping::map_fd(fd.get(), n, PROT_READ, "weight pool"));
    return std::unique_ptr<MappedPool>(new MmapPool(std::move(m), PROT_READ));
  }
  Result<std::unique_ptr<MappedPool>> map_writable(UniqueFd fd, uint64_t n) override {
    FR_ASSIGN(Mapping m, Mapping::map_fd(fd.get(), n, PROT_READ | PROT_WRITE, "weight pool"));
    return std::unique_ptr<MappedPool>(new MmapPool(std::move(m), PROT_READ | PROT_WRITE));
  }
  Result<std::unique_ptr<MappedPool>> copy_of(const MappedPool& src, uint64_t data_bytes) override {
    auto p = std::make_unique<HeapPool>(std::max<uint64_t>(data_bytes, 1));
    if (!p->base()) return make_error(Errc::kIo, "out of host memory for a " + std::to_string(data_bytes) + "-byte copy");
    std::memcpy(p->base(), src.base(), data_bytes);
    return std::unique_ptr<MappedPool>(std::move(p));
  }
  Result<uint64_t> digest(const MappedPool& p, uint64_t data_bytes) override { return digest_of(p.base(), data_bytes); }
  Status copy_in(MappedPool& dst, uint64_t offset, const void* src, uint64_t n) override {
    if (offset > dst.size() || n > dst.size() - offset) return make_error(Errc::kInternal, "copy past the pool");
    std::memcpy(dst.base() + offset, src, n);
    return {};
  }
  Status sync() override { return {}; }
  Result<std::unique_ptr<ArenaRange>> reserve_arena(uint64_t bytes) override { return HostArenaRange::make(bytes); }

 private:
  const std::string m_uuid;
};

}  // namespace

std::string daemon_socket(const DeviceApi& dev, const std::string& socket_dir) {
  // fastrestartd exports weights.socket_dir to its engine as FASTRESTART_SOCKET_DIR (docs/engine_loader.md).
  std::string dir = socket_dir;
  if (const char* env = std::getenv("FASTRESTART_SOCKET_DIR"); dir.empty() && env && *env) dir = env;
  return (dir.empty() ? default_socket_dir() : dir) + "/weightd-" + dev.gpu_uuid() + ".sock";
}

std::unique_ptr<DeviceApi> make_host_device() { return std::make_unique<HostDevice>("host"); }

Result<std::unique_ptr<DeviceApi>> open_device(const std::string& device) {
  if (device == "host") return make_host_device();
  if (device.rfind("host:", 0) == 0) {
    // One of several host daemons standing for GPUs (common/host_device.h).
    auto uuid = fr::host_device_uuid(device.substr(5));
    if (!uuid.ok() || device.size() == 5)
      return make_error(Errc::kInvalidArgument, "device '" + device + "': expected host:<name> (1-32 of A-Z a-z 0-9 _ . -)");
    return std::unique_ptr<DeviceApi>(std::make_unique<HostDevice>(*uuid));
  }
  if (device.rfind("cuda:", 0) == 0) {
    const std::string n = device.substr(5);
    if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos)
      return make_error(Errc::kInvalidArgument, "device '" + device + "': expected cuda:<ordinal>");
    return make_cuda_device(std::stoi(n));
  }
  return make_error(Errc::kInvalidArgument, "device '" + device + "': expected host, host:<name> or cuda:<ordinal>");
}

}  // namespace fr::loader
