// The host backend: each pool is a memfd, sealed once filled (ARCHITECTURE.md, "A host backend
// with the same protocol").
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "common/digest.h"
#include "common/host_device.h"
#include "common/mapping.h"
#include "daemon/backend.h"

namespace fr::daemon {
namespace {

constexpr uint64_t kPage = 4096;

class HostUploader final : public Uploader {
 public:
  explicit HostUploader(std::byte* base) : m_base(base) {}
  Result<std::byte*> acquire(uint64_t offset, size_t) override { return m_base + offset; }
  Status submit(uint64_t, size_t) override { return {}; }
  Status finish() override { return {}; }
  size_t max_chunk() const override { return 64u << 20; }

 private:
  std::byte* m_base;
};

class HostPool final : public Pool {
 public:
  HostPool(UniqueFd fd, Mapping map) : m_fd(std::move(fd)), m_map(std::move(map)), m_size(m_map.size()) {}
  // Constant, not m_map.size(): seal() remaps on the loader thread while status requests read the size
  // on connection threads (a data race TSan found: docs/reliability.md).
  uint64_t size() const override { return m_size; }

  Result<UniqueFd> share_fd() override {
    // Sealed: a dup is harmless (F_SEAL_WRITE forbids writable mappings and writes). Unsealed: the
    // publisher needs write access to the same memfd.
    UniqueFd d(::fcntl(m_fd.get(), F_DUPFD_CLOEXEC, 0));
    if (!d) return sys_error("dup memfd");
    return d;
  }

  Result<std::unique_ptr<Uploader>> make_uploader() override {
    return std::unique_ptr<Uploader>(new HostUploader(m_map.bytes()));
  }

  Status seal() override {
    // Any shared mapping of an O_RDWR memfd counts as writable (VM_MAYWRITE), even PROT_READ, and makes
    // F_SEAL_WRITE fail with EBUSY: unmap, seal, then map again (a sealed memfd maps read-only for good).
    size_t n = m_map.size();
    m_map.reset();
    if (::fcntl(m_fd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0)
      return errno == EBUSY ? make_error(Errc::kBusy, "cannot seal the pool: a writer still maps it writable")
                            : sys_error("seal memfd");
    FR_ASSIGN(m_map, Mapping::map_fd(m_fd.get(), n, PROT_READ, "memfd pool"));
    return {};
  }

  Status fix_size() override {
    if (::fcntl(m_fd.get(), F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0) return sys_error("seal the arena's memfd");
    return {};
  }

  Status zero() override {
    // Punching every page out frees it and makes it read as zero, in time independent of the size
    // (a 2^40-byte arena that was never touched costs nothing); allowed under F_SEAL_SHRINK|F_SEAL_GROW.
    if (::fallocate(m_fd.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(m_size)) != 0)
      return sys_error("clear the arena's memfd (fallocate PUNCH_HOLE)");
    return {};
  }

  Result<uint64_t> digest(uint64_t data_bytes) override {
    if (data_bytes > m_map.size()) return make_error(Errc::kInternal, "digest past the pool");
    return digest_of(m_map.data(), data_bytes);
  }

 private:
  UniqueFd m_fd;
  Mapping m_map;
  const uint64_t m_size;
};

class HostBackend final : public Backend {
 public:
  explicit HostBackend(std::string uuid) : m_uuid(std::move(uuid)) {}
  std::string name() const override { return "host"; }
  std::string gpu_uuid() const override { return m_uuid; }
  std::string gpu_name() const override { return m_uuid; }

  Result<std::unique_ptr<Pool>> allocate(uint64_t bytes) override {
    uint64_t n = std::max<uint64_t>(kPage, (bytes + kPage - 1) / kPage * kPage);
    UniqueFd fd(::memfd_create("fastrestart-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd) return sys_error("memfd_create");
    if (::ftruncate(fd.get(), static_cast<off_t>(n)) != 0) return sys_error("size memfd pool");
    FR_ASSIGN(Mapping m, Mapping::map_fd(fd.get(), n, PROT_READ | PROT_WRITE, "memfd pool"));
    return std::unique_ptr<Pool>(new HostPool(std::move(fd), std::move(m)));
  }

 private:
  const std::string m_uuid;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_host_backend(const std::string& device) {
  FR_ASSIGN(std::string uuid, fr::host_device_uuid(device));
  return std::unique_ptr<Backend>(std::make_unique<HostBackend>(std::move(uuid)));
}

}  // namespace fr::daemon
