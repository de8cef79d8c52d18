// Without a driver the CUDA entry points fail cleanly (the driver is loaded at run time): an Error, never a crash.
#include "cuda/driver.h"
#include "cuda_test_util.h"
#include "daemon/backend.h"
#include "engine_loader/device.h"

namespace fr {
namespace {

TEST(NoDriver, CleanErrors) {
  if (cuda::load_driver().ok()) GTEST_SKIP() << "a CUDA driver is present; this test is for machines without";
  auto d = cuda::load_driver();
  EXPECT_EQ(d.error().code, Errc::kCuda);
  EXPECT_EQ(d.error().message, "no CUDA driver (libcuda.so.1 not found)");
  auto b = daemon::make_cuda_backend("0");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code, Errc::kCuda);
  EXPECT_NE(b.error().message.find("no CUDA driver"), std::string::npos);
  auto dev = loader::make_cuda_device(0);
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.error().code, Errc::kCuda);
}

TEST(NoDriver, MalformedGpuNamesAreRejectedBeforeTheDriverIsAsked) {
  for (const char* bad : {"", "gpu0", "-1", "123456", "GPU"}) {
    auto b = daemon::make_cuda_backend(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.error().code, Errc::kInvalidArgument) << bad << ": " << b.error().to_string();
  }
}

}  // namespace
}  // namespace fr
