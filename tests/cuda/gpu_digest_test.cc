// The GPU digest kernel agrees bit for bit with libxxhash (common/digest.h) on the CPU.
#include <chrono>
#include <cstdio>

#include "common/digest.h"
#include "cuda/device.h"
#include "cuda/handles.h"
#include "cuda/kernels.h"
#include "cuda_test_util.h"

namespace fr::cuda {
namespace {

struct OnGpu {
  std::shared_ptr<Device> dev;
  DeviceMemory mem;
};

OnGpu upload(const std::vector<unsigned char>& bytes) {
  auto dev = Device::open_ordinal(0);
  EXPECT_TRUE(dev.ok()) << dev.error().to_string();
  auto mem = alloc_device((*dev)->context(), std::max<size_t>(bytes.size(), 1));
  EXPECT_TRUE(mem.ok()) << mem.error().to_string();
  ScopedContext scope((*dev)->context());
  EXPECT_EQ((*dev)->driver().cuMemcpyHtoD(mem->get(), bytes.data(), bytes.size()), CUDA_SUCCESS);
  return OnGpu{*dev, std::move(*mem)};
}

class GpuDigest : public ::testing::TestWithParam<size_t> {};

TEST_P(GpuDigest, MatchesCpu) {
  FR_SKIP_WITHOUT_GPU();
  const size_t n = GetParam();
  auto bytes = cuda_test::random_bytes(n, n * 7 + 1);
  OnGpu g = upload(bytes);
  auto k = g.dev->kernels();
  ASSERT_TRUE(k.ok()) << k.error().to_string();
  auto hashes = (*k)->chunk_hashes(g.mem.get(), n, nullptr);
  ASSERT_TRUE(hashes.ok()) << hashes.error().to_string();
  ASSERT_EQ(hashes->size(), digest_chunk_count(n));
  for (size_t i = 0; i < hashes->size(); ++i) {
    size_t off = i * kDigestChunkBytes;
    ASSERT_EQ((*hashes)[i], hash_chunk(bytes.data() + off, std::min(kDigestChunkBytes, n - off))) << "chunk " << i;
  }
  auto d = (*k)->digest(g.mem.get(), n, nullptr);
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(*d, digest_of(bytes.data(), n));
}

// Short inputs exercise every tail path (under one stripe, 4-byte and 1-byte steps); the rest cross
// chunk boundaries with partial last chunks.
INSTANTIATE_TEST_SUITE_P(Sizes, GpuDigest,
                         ::testing::Values(0, 1, 3, 4, 7, 8, 31, 32, 33, 100, 65535, 65536, 65537, 3 * 65536 + 77,
                                           (64u << 20) + 12345));

TEST(GpuDigestSpeed, TwoGiB) {
  FR_SKIP_WITHOUT_GPU();
  const size_t n = size_t{2} << 30;
  auto dev = Device::open_ordinal(0);
  ASSERT_TRUE(dev.ok());
  auto mem = alloc_device((*dev)->context(), n);
  ASSERT_TRUE(mem.ok()) << mem.error().to_string();
  {
    ScopedContext scope((*dev)->context());
    ASSERT_EQ((*dev)->driver().cuMemsetD8(mem->get(), 0x5A, n), CUDA_SUCCESS);
  }
  auto k = (*dev)->kernels();
  ASSERT_TRUE(k.ok());
  ASSERT_TRUE((*k)->digest(mem->get(), n, nullptr).ok());  // warm-up
  auto t0 = std::chrono::steady_clock::now();
  auto d = (*k)->digest(mem->get(), n, nullptr);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(d.ok());
  std::printf("GPU digest of 2 GiB: %.2f ms, %.0f GB/s\n", s * 1e3, static_cast<double>(n) / s / 1e9);
  RecordProperty("gbps", static_cast<int>(static_cast<double>(n) / s / 1e9));
}

}  // namespace
}  // namespace fr::cuda
