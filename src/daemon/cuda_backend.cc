// The CUDA backend: one VMM allocation per pool, shared by POSIX fd (ARCHITECTURE.md, "One pool
// per entry, shared by file descriptor").
//
// Pool: cuMemCreate (POSIX fd handle type) rounded up to the VMM granularity, mapped read-write into the
// daemon only, zero-filled before it is handed out. share_fd() exports the allocation once and hands each
// client a duplicate; engines map it read-only, so seal() has nothing to do. Uploader: two pinned 64 MiB
// staging slots (kept in a per-backend cache between preloads) and a stream per reader thread; while the
// GPU copies one slot the thread fills the other (acquire waits for the slot's previous copy). digest()
// runs the XXH64 chunk kernel over the pool on the GPU.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

#include <algorithm>
#include <array>
#include <mutex>
#include <vector>

#include "common/digest.h"
#include "cuda/device.h"
#include "cuda/handles.h"
#include "cuda/kernels.h"
#include "cuda/vmm.h"
#include "daemon/backend.h"

namespace fr::daemon {
namespace {

using cuda::check;
using cuda::ScopedContext;

constexpr size_t kSlotBytes = 64u << 20;

// Pinned staging buffers outlive the uploaders that use them: pinning 64 MiB costs milliseconds, and a
// preload with 8 readers needs 16 of them. At most kMaxCached are kept (1 GiB of pinned host memory).
class StagingCache {
 public:
  static constexpr size_t kMaxCached = 16;
  Result<cuda::PinnedBuffer> take(CUcontext ctx) {
    {
      std::lock_guard lock(m_mu);
      if (!m_free.empty()) {
        cuda::PinnedBuffer b = std::move(m_free.back());
        m_free.pop_back();
        return b;
      }
    }
    return cuda::alloc_pinned(ctx, kSlotBytes);
  }
  void give_back(cuda::PinnedBuffer b) {
    std::lock_guard lock(m_mu);
    if (m_free.size() < kMaxCached) m_free.push_back(std::move(b));
  }

 private:
  std::mutex m_mu;
  std::vector<cuda::PinnedBuffer> m_free;  // GUARDED_BY(m_mu)
};

class CudaUploader final : public Uploader {
 public:
  static Result<std::unique_ptr<Uploader>> make(std::shared_ptr<cuda::Device> dev, std::shared_ptr<StagingCache> cache,
                                                CUdeviceptr base, uint64_t size, std::shared_ptr<std::atomic<bool>> direct) {
    std::unique_ptr<CudaUploader> u(new CudaUploader(dev, cache, base, size));
    u->m_direct = std::move(direct);
    FR_ASSIGN(u->m_stream, cuda::create_stream(dev->context()));
    for (auto& s : u->m_slots) {
      FR_ASSIGN(s.buffer, cache->take(dev->context()));
      FR_ASSIGN(s.done, cuda::create_event(dev->context()));
    }
    return std::unique_ptr<Uploader>(std::move(u));
  }

  ~CudaUploader() override {
    // The slots must not be reused or freed under an in-flight copy.
    if (finish().ok())
      for (auto& s : m_slots)
        if (s.buffer.valid()) m_cache->give_back(std::move(s.buffer));
  }

  Result<std::byte*> acquire(uint64_t offset, size_t n) override {
    FR_TRY(check_range(offset, n));
    Slot& s = m_slots[m_next];
    ScopedContext scope(m_dev->context());
    FR_TRY(scope.status());
    // An event never recorded counts as complete, so the first use of each slot does not wait.
    FR_TRY(check(m_dev->driver().cuEventSynchronize(s.done.get()), "upload copy (cuEventSynchronize)"));
    m_current = static_cast<int>(m_next);
    m_next ^= 1;
    return static_cast<std::byte*>(s.buffer.get());
  }

  Status submit(uint64_t offset, size_t n) override {
    if (m_current < 0) return make_error(Errc::kInternal, "Uploader::submit without acquire");
    FR_TRY(check_range(offset, n));
    Slot& s = m_slots[static_cast<size_t>(m_current)];
    m_current = -1;
    const cuda::Driver& d = m_dev->driver();
    ScopedContext scope(m_dev->context());
    FR_TRY(scope.status());
    FR_TRY(check(d.cuMemcpyHtoDAsync(m_base + offset, s.buffer.get(), n, m_stream.get()), "cuMemcpyHtoDAsync"));
    return check(d.cuEventRecord(s.done.get(), m_stream.get()), "cuEventRecord");
  }

  Status finish() override {
    if (!m_stream.valid()) return {};
    ScopedContext scope(m_dev->context());
    FR_TRY(scope.status());
    return check(m_dev->driver().cuStreamSynchronize(m_stream.get()), "upload copies (cuStreamSynchronize)");
  }

  size_t max_chunk() const override { return kSlotBytes; }

  // Brief: registering a read-only mmap of a page-cached file and DMA-ing from it runs at PCIe speed
  // (55 GB/s measured) with no CPU copy. Registration pins the pages for the copy only.
  Result<bool> upload_file_range(int fd, uint64_t file_offset, uint64_t offset, size_t n) override {
    if (n == 0) return true;
    if (!m_direct->load()) return false;
    if (offset > m_size || n > m_size - offset) return make_error(Errc::kInternal, "file upload outside the pool");
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t a = file_offset / page * page;
    const size_t len = static_cast<size_t>((file_offset + n - a + page - 1) / page * page);
    void* p = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(a));
    if (p == MAP_FAILED) return sys_error("mmap checkpoint for upload");
    const cuda::Driver& d = m_dev->driver();
    ScopedContext scope(m_dev->context());
    Status st = scope.status();
    CUresult reg = CUDA_SUCCESS;
    if (st.ok()) reg = d.cuMemHostRegister(p, len, CU_MEMHOSTREGISTER_READ_ONLY);
    if (st.ok() && reg != CUDA_SUCCESS) {
      // Not supported for file mappings on this driver/platform: fall back to staging for good.
      m_direct->store(false);
      ::munmap(p, len);
      return false;
    }
    if (st.ok()) {
      st = check(d.cuMemcpyHtoDAsync(m_base + offset, static_cast<char*>(p) + (file_offset - a), n, m_stream.get()),
                 "cuMemcpyHtoDAsync(file pages)");
      Status sync = check(d.cuStreamSynchronize(m_stream.get()), "cuStreamSynchronize(file pages)");
      if (st.ok()) st = sync;
      d.cuMemHostUnregister(p);
    }
    ::munmap(p, len);
    if (!st.ok()) return st.error();
    return true;
  }

 private:
  struct Slot {
    cuda::PinnedBuffer buffer;
    cuda::Event done;  // recorded after the slot's last copy
  };

  CudaUploader(std::shared_ptr<cuda::Device> dev, std::shared_ptr<StagingCache> cache, CUdeviceptr base, uint64_t size)
      : m_dev(std::move(dev)), m_cache(std::move(cache)), m_base(base), m_size(size) {}

  Status check_range(uint64_t offset, size_t n) const {
    if (n > kSlotBytes || offset > m_size || n > m_size - offset)
      return make_error(Errc::kInternal, "upload of " + std::to_string(n) + " bytes at " + std::to_string(offset) +
                                             " outside the pool or the staging slot");
    return {};
  }

  std::shared_ptr<cuda::Device> m_dev;
  std::shared_ptr<StagingCache> m_cache;
  CUdeviceptr m_base;
  uint64_t m_size;
  cuda::Stream m_stream;
  std::array<Slot, 2> m_slots;
  size_t m_next = 0;
  int m_current = -1;  // slot handed out by acquire() and not yet submitted
  std::shared_ptr<std::atomic<bool>> m_direct;  // the backend's: file-page uploads still believed to work
};

class CudaPool final : public Pool {
 public:
  CudaPool(std::shared_ptr<cuda::Device> dev, std::shared_ptr<StagingCache> cache, cuda::Allocation alloc,
           std::unique_ptr<cuda::MappedRange> map, std::shared_ptr<std::atomic<bool>> direct)
      : m_dev(std::move(dev)), m_cache(std::move(cache)), m_alloc(std::move(alloc)), m_map(std::move(map)),
        m_direct(std::move(direct)) {}
  ~CudaPool() override {
    // Unmap before dropping the allocation handle; importers keep their own references.
    m_map.reset();
  }

  uint64_t size() const override { return m_map->size(); }

  Result<UniqueFd> share_fd() override {
    // Exporting costs about as much as the client's whole import and map, so it happens once per pool;
    // each client gets its own duplicate of that descriptor (importing a duplicate is the same import).
    std::lock_guard lock(m_mu);
    if (!m_exported) {
      FR_ASSIGN(m_exported, cuda::export_fd(*m_dev, m_alloc));
    }
    UniqueFd d(::fcntl(m_exported.get(), F_DUPFD_CLOEXEC, 0));
    if (!d) return sys_error("dup the exported pool fd");
    return d;
  }

  Result<std::unique_ptr<Uploader>> make_uploader() override {
    return CudaUploader::make(m_dev, m_cache, m_map->ptr(), m_map->size(), m_direct);
  }

  Status seal() override { return {}; }
  bool digest_on_device() const override { return true; }

  Result<uint64_t> digest(uint64_t data_bytes) override {
    if (data_bytes > size()) return make_error(Errc::kInternal, "digest past the pool");
    FR_ASSIGN(const cuda::Kernels* k, m_dev->kernels());
    return k->digest(m_map->ptr(), data_bytes, nullptr);
  }

 private:
  std::shared_ptr<cuda::Device> m_dev;
  std::shared_ptr<StagingCache> m_cache;
  cuda::Allocation m_alloc;
  std::unique_ptr<cuda::MappedRange> m_map;
  std::mutex m_mu;
  UniqueFd m_exported;  // GUARDED_BY(m_mu)
  std::shared_ptr<std::atomic<bool>> m_direct;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(std::shared_ptr<cuda::Device> dev) : m_dev(std::move(dev)) {}
  std::string name() const override { return "cuda"; }
  std::string gpu_uuid() const override { return m_dev->uuid(); }
  std::string gpu_name() const override { return m_dev->name(); }

  Result<std::unique_ptr<Pool>> allocate(uint64_t bytes) override {
    const uint64_t g = m_dev->vmm_granularity();
    const uint64_t n = std::max<uint64_t>(g, (bytes + g - 1) / g * g);
    FR_ASSIGN(cuda::Allocation alloc, cuda::create_shareable(m_dev, n));
    FR_ASSIGN(auto map, cuda::map_allocation(m_dev, alloc, n, cuda::Access::kReadWrite));
    const cuda::Driver& d = m_dev->driver();
    ScopedContext scope(m_dev->context());
    FR_TRY(scope.status());
    // Padding must read as zero (docs/protocol.md, Manifest). Uploaders use non-blocking streams, which do
    // not order after the legacy stream, so wait for the fill here.
    FR_TRY(check(d.cuMemsetD8(map->ptr(), 0, n), "cuMemsetD8(pool)"));
    FR_TRY(check(d.cuStreamSynchronize(nullptr), "cuMemsetD8(pool)"));
    return std::unique_ptr<Pool>(new CudaPool(m_dev, m_cache, std::move(alloc), std::move(map), m_direct));
  }

 private:
  std::shared_ptr<cuda::Device> m_dev;
  std::shared_ptr<StagingCache> m_cache = std::make_shared<StagingCache>();
  // Off by default: measured on the H200 (docs/bench-notes.md), registering file pages per 64 MiB task
  // was slower (9.7 GB/s warm) than staging through pinned slots. FASTRESTART_DIRECT_UPLOAD=1 turns it on.
  std::shared_ptr<std::atomic<bool>> m_direct = std::make_shared<std::atomic<bool>>(
      std::getenv("FASTRESTART_DIRECT_UPLOAD") != nullptr);
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_backend(const std::string& gpu) {
  FR_ASSIGN(auto dev, cuda::Device::open(gpu));
  return std::unique_ptr<Backend>(new CudaBackend(std::move(dev)));
}

}  // namespace fr::daemon
