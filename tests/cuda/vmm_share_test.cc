// Pools shared between processes through exported VMM descriptors (ARCHITECTURE.md): the importer sees
// the exporter's bytes, cannot write through a read-only mapping (only its own context suffers), and
// keeps its mapping after the exporter exits.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <regex>

#include "common/digest.h"
#include "common/unix_socket.h"
#include "cuda/device.h"
#include "cuda/vmm.h"
#include "cuda_test_util.h"
#include "daemon/backend.h"
#include "engine_loader/device.h"

namespace fr {
namespace {

using cuda_test::run_helper;

// A pool filled with random bytes by this process, as the daemon would.
struct Filled {
  std::unique_ptr<daemon::Backend> backend;
  std::unique_ptr<daemon::Pool> pool;
  uint64_t data_bytes = 0;
  uint64_t digest = 0;
};

Filled fill_pool(uint64_t n, uint64_t seed) {
  Filled f;
  auto b = daemon::make_cuda_backend("0");
  EXPECT_TRUE(b.ok()) << b.error().to_string();
  f.backend = std::move(*b);
  auto p = f.backend->allocate(n);
  EXPECT_TRUE(p.ok()) << p.error().to_string();
  f.pool = std::move(*p);
  auto up = f.pool->make_uploader();
  EXPECT_TRUE(up.ok()) << up.error().to_string();
  auto data = cuda_test::random_bytes(n, seed);
  // Uneven pieces, so both staging slots are reused several times.
  for (uint64_t off = 0; off < n;) {
    size_t piece = std::min<uint64_t>({(*up)->max_chunk(), n - off, (off / 3 + 1) * 4096 * 1021});
    auto buf = (*up)->acquire(off, piece);
    EXPECT_TRUE(buf.ok());
    std::memcpy(*buf, data.data() + off, piece);
    EXPECT_TRUE((*up)->submit(off, piece).ok());
    off += piece;
  }
  EXPECT_TRUE((*up)->finish().ok());
  f.data_bytes = n;
  f.digest = digest_of(data.data(), n);
  return f;
}

uint64_t pool_digest(daemon::Pool& p, uint64_t n) {
  auto d = p.digest(n);
  EXPECT_TRUE(d.ok()) << d.error().to_string();
  return d.ok() ? *d : 0;
}

TEST(CudaBackend, NamesTheGpuByUuid) {
  FR_SKIP_WITHOUT_GPU();
  auto b = daemon::make_cuda_backend("0");
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  EXPECT_TRUE(std::regex_match((*b)->gpu_uuid(), std::regex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")))
      << (*b)->gpu_uuid();
  auto again = daemon::make_cuda_backend((*b)->gpu_uuid());
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  EXPECT_EQ((*again)->gpu_uuid(), (*b)->gpu_uuid());
  auto unknown = daemon::make_cuda_backend("GPU-00000000-0000-0000-0000-000000000000");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, Errc::kCuda);
  EXPECT_NE(unknown.error().message.find("unknown GPU"), std::string::npos);
}

TEST(CudaBackend, PoolIsZeroFilledAndRounded) {
  FR_SKIP_WITHOUT_GPU();
  auto b = daemon::make_cuda_backend("0");
  ASSERT_TRUE(b.ok());
  auto p = (*b)->allocate(5'000'001);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  EXPECT_GE((*p)->size(), 5'000'001u);
  EXPECT_EQ((*p)->size() % (2u << 20), 0u);
  std::vector<unsigned char> zeros((*p)->size());
  EXPECT_EQ(pool_digest(**p, (*p)->size()), digest_of(zeros.data(), zeros.size()));
}

TEST(CudaBackend, UploaderRoundTrip) {
  FR_SKIP_WITHOUT_GPU();
  Filled f = fill_pool((300u << 20) + 4321, 11);
  EXPECT_EQ(pool_digest(*f.pool, f.data_bytes), f.digest);
}

TEST(VmmShare, ImporterSeesTheBytes) {
  FR_SKIP_WITHOUT_GPU();
  Filled f = fill_pool((40u << 20) + 5, 21);
  auto fd = f.pool->share_fd();
  ASSERT_TRUE(fd.ok()) << fd.error().to_string();
  auto r = run_helper({"import-digest", "10", std::to_string(f.pool->size()), std::to_string(f.data_bytes)},
                      {fd->get()});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, digest_hex(f.digest) + "\n");
}

TEST(VmmShare, ReadOnlyMappingRefusesWritesInTheWriterOnly) {
  FR_SKIP_WITHOUT_GPU();
  Filled f = fill_pool(8u << 20, 31);
  auto fd = f.pool->share_fd();
  ASSERT_TRUE(fd.ok());
  auto r = run_helper({"write-ro", "10", std::to_string(f.pool->size())}, {fd->get()});
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("write refused"), std::string::npos) << r.out;
  // Our bytes and our context are untouched.
  EXPECT_EQ(pool_digest(*f.pool, f.data_bytes), f.digest);
}

TEST(VmmShare, WritableMappingWrites) {
  // The control for the test above: the same write through a writable mapping lands in our pool.
  FR_SKIP_WITHOUT_GPU();
  Filled f = fill_pool(8u << 20, 41);
  auto fd = f.pool->share_fd();
  ASSERT_TRUE(fd.ok());
  auto r = run_helper({"write-rw", "10", std::to_string(f.pool->size()), "171"}, {fd->get()});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto data = cuda_test::random_bytes(f.data_bytes, 41);
  data[0] = 171;
  EXPECT_EQ(pool_digest(*f.pool, f.data_bytes), digest_of(data.data(), data.size()));
}

TEST(VmmShare, MappingSurvivesTheExportersExit) {
  FR_SKIP_WITHOUT_GPU();
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd ours(sv[0]), theirs(sv[1]);
  const uint64_t n = (24u << 20) + 99;
  int out = -1;
  pid_t pid = cuda_test::start_helper({"export", "10", std::to_string(n), "51"}, {theirs.get()}, &out);
  ASSERT_GT(pid, 0);
  theirs.reset();
  char msg[64];
  std::vector<UniqueFd> fds;
  auto st = recv_exact(ours.get(), msg, sizeof msg, &fds, deadline_in(60));
  if (!st.ok()) {
    auto r = cuda_test::wait_child(pid, out);
    FAIL() << st.error().to_string() << "; helper: " << r.out;
  }
  ASSERT_EQ(fds.size(), 1u);
  std::string text(msg, sizeof msg);
  std::string digest = text.substr(0, 16);
  uint64_t pool_bytes = std::stoull(text.substr(17));

  auto dev = loader::make_cuda_device(0);
  ASSERT_TRUE(dev.ok()) << dev.error().to_string();
  auto m = (*dev)->map_read_only(std::move(fds[0]), pool_bytes);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  ours.reset();  // the exporter unmaps, releases and exits
  auto r = cuda_test::wait_child(pid, out);
  ASSERT_EQ(r.exit_code, 0) << r.out;

  auto data = cuda_test::random_bytes(n, 51);
  EXPECT_EQ(digest, digest_hex(digest_of(data.data(), n)));
  auto d = (*dev)->digest(**m, n);
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(digest_hex(*d), digest);
}

// Not a check: prints what the daemon-side steps of an attach and a preload cost on this machine.
TEST(CudaCosts, ExportAndStaging) {
  FR_SKIP_WITHOUT_GPU();
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); };
  auto dev = cuda::Device::open_ordinal(0);
  ASSERT_TRUE(dev.ok());
  const uint64_t n = uint64_t{16} << 30;
  auto t = Clock::now();
  auto alloc = cuda::create_shareable(*dev, n);
  ASSERT_TRUE(alloc.ok()) << alloc.error().to_string();
  double create = ms(t);
  t = Clock::now();
  auto map = cuda::map_allocation(*dev, *alloc, n, cuda::Access::kReadWrite);
  ASSERT_TRUE(map.ok()) << map.error().to_string();
  double mapped = ms(t);
  std::printf("16 GiB VMM pool: cuMemCreate %.3f ms, reserve+map+access %.3f ms\n", create, mapped);
  for (int i = 0; i < 3; ++i) {
    t = Clock::now();
    auto fd = cuda::export_fd(**dev, *alloc);
    ASSERT_TRUE(fd.ok()) << fd.error().to_string();
    std::printf("cuMemExportToShareableHandle (16 GiB): %.3f ms\n", ms(t));
  }
  for (int i = 0; i < 3; ++i) {
    t = Clock::now();
    auto b = cuda::alloc_pinned((*dev)->context(), 64u << 20);
    ASSERT_TRUE(b.ok());
    std::printf("cuMemHostAlloc (64 MiB): %.3f ms\n", ms(t));
  }
}

TEST(CudaDevice, CopyModeAndPublishCopies) {
  FR_SKIP_WITHOUT_GPU();
  Filled f = fill_pool(6u << 20, 61);
  auto dev = loader::make_cuda_device(0);
  ASSERT_TRUE(dev.ok());
  auto fd = f.pool->share_fd();
  ASSERT_TRUE(fd.ok());
  auto w = (*dev)->map_writable(std::move(*fd), f.pool->size());
  ASSERT_TRUE(w.ok()) << w.error().to_string();
  // copy_of: a private copy with the same digest.
  auto c = (*dev)->copy_of(**w, f.data_bytes);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  auto dc = (*dev)->digest(**c, f.data_bytes);
  ASSERT_TRUE(dc.ok());
  EXPECT_EQ(*dc, f.digest);
  // copy_in from host memory and from device memory (the copy) into the writable mapping.
  std::vector<unsigned char> host(4096, 0x11);
  auto s1 = (*dev)->copy_in(**w, 0, host.data(), host.size());
  ASSERT_TRUE(s1.ok()) << s1.error().to_string();
  auto s2 = (*dev)->copy_in(**w, 4096, (*c)->base(), 4096);
  ASSERT_TRUE(s2.ok()) << s2.error().to_string();
  auto s3 = (*dev)->sync();
  ASSERT_TRUE(s3.ok()) << s3.error().to_string();
  auto data = cuda_test::random_bytes(f.data_bytes, 61);
  std::memcpy(data.data() + 4096, data.data(), 4096);
  std::memset(data.data(), 0x11, 4096);
  EXPECT_EQ(pool_digest(*f.pool, f.data_bytes), digest_of(data.data(), data.size()));
}

// Snapshots without the weights (docs/snapshot.md): release() unmaps the imported pool but keeps its VA
// range; remap() maps a fresh export of the same pool there again, and the bytes read back the same.
TEST(CudaDevice, ReleaseKeepsTheRangeAndRemapsAtTheSameAddress) {
  FR_SKIP_WITHOUT_GPU();
  Filled f = fill_pool(6u << 20, 71);
  auto dev = loader::make_cuda_device(0);
  ASSERT_TRUE(dev.ok());
  auto fd = f.pool->share_fd();
  ASSERT_TRUE(fd.ok());
  auto m = (*dev)->map_read_only(std::move(*fd), f.pool->size());
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  std::byte* before = (*m)->base();
  auto r = (*m)->release();
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_TRUE((*m)->released());
  EXPECT_TRUE((*m)->release().ok());  // idempotent
  auto again = f.pool->share_fd();
  ASSERT_TRUE(again.ok());
  auto s = (*m)->remap(std::move(*again));
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_FALSE((*m)->released());
  EXPECT_EQ((*m)->base(), before);
  auto d = (*dev)->digest(**m, f.data_bytes);
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(*d, f.digest);
}

// KV arenas on CUDA (docs/engine_loader.md, "KV arenas"): the placeholder is one granule-sized allocation
// mapped at every chunk (a write at one chunk reads back at another), and the swap maps the daemon's pool
// over the whole range at the same address.
TEST(CudaDevice, ArenaPlaceholderAliasesAndTheSwapKeepsTheAddress) {
  FR_SKIP_WITHOUT_GPU();
  Filled f = fill_pool(6u << 20, 73);
  auto dev = loader::make_cuda_device(0);
  ASSERT_TRUE(dev.ok()) << dev.error().to_string();
  auto range = (*dev)->reserve_arena(f.pool->size());
  ASSERT_TRUE(range.ok()) << range.error().to_string();
  auto& r = **range;
  const uint64_t chunk = r.placeholder_bytes();
  ASSERT_GT(chunk, 0u);
  ASSERT_LT(chunk, r.size());
  auto cd = cuda::Device::open_ordinal(0);
  ASSERT_TRUE(cd.ok());
  const cuda::Driver& d = (*cd)->driver();
  cuda::ScopedContext scope((*cd)->context());
  ASSERT_TRUE(scope.status().ok());
  const auto base = reinterpret_cast<CUdeviceptr>(r.base());
  const uint32_t mark = 0xfeedbeef;
  ASSERT_EQ(d.cuMemcpyHtoD(base, &mark, sizeof mark), CUDA_SUCCESS);
  uint32_t seen = 0;
  ASSERT_EQ(d.cuMemcpyDtoH(&seen, base + chunk, sizeof seen), CUDA_SUCCESS);
  EXPECT_EQ(seen, mark) << "every chunk of the placeholder is the same memory";

  auto fd = f.pool->share_fd();
  ASSERT_TRUE(fd.ok());
  auto s = r.swap_in(std::move(*fd), f.pool->size());
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_TRUE(r.swapped());
  EXPECT_EQ(reinterpret_cast<CUdeviceptr>(r.base()), base);
  std::vector<unsigned char> back(f.data_bytes);
  ASSERT_EQ(d.cuMemcpyDtoH(back.data(), base, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(digest_of(back.data(), back.size()), f.digest) << "the pool's bytes, through the range's address";
}

// A range of more than kMaxPlaceholderMaps granules that is no multiple of the chunk: every chunk maps a
// placeholder allocation whole (the last one its own, shorter one), where mapping a part of the chunk's
// allocation can be refused by the driver (CUDA_ERROR_NOT_SUPPORTED). The whole range is writable.
TEST(CudaDevice, ArenaPlaceholderOfARangeThatIsNoMultipleOfItsChunk) {
  FR_SKIP_WITHOUT_GPU();
  auto cd = cuda::Device::open_ordinal(0);
  ASSERT_TRUE(cd.ok());
  const uint64_t g = (*cd)->vmm_granularity();
  const uint64_t bytes = (loader::kMaxPlaceholderMaps + 1) * g;  // chunk 2 granules: the last one alone
  ASSERT_NE(bytes % loader::placeholder_size(bytes, g), 0u);
  auto dev = loader::make_cuda_device(0);
  ASSERT_TRUE(dev.ok()) << dev.error().to_string();
  auto range = (*dev)->reserve_arena(bytes);
  ASSERT_TRUE(range.ok()) << range.error().to_string();
  auto& r = **range;
  EXPECT_EQ(r.size(), bytes);
  EXPECT_EQ(r.placeholder_bytes(), loader::placeholder_size(bytes, g) + bytes % loader::placeholder_size(bytes, g));
  const cuda::Driver& d = (*cd)->driver();
  cuda::ScopedContext scope((*cd)->context());
  ASSERT_TRUE(scope.status().ok());
  const auto base = reinterpret_cast<CUdeviceptr>(r.base());
  ASSERT_EQ(d.cuMemsetD8(base, 0x5a, bytes), CUDA_SUCCESS);
  ASSERT_EQ(d.cuCtxSynchronize(), CUDA_SUCCESS);
  unsigned char last = 0;
  ASSERT_EQ(d.cuMemcpyDtoH(&last, base + bytes - 1, 1), CUDA_SUCCESS);
  EXPECT_EQ(last, 0x5a);
}

}  // namespace
}  // namespace fr
