// Host device names (common/host_device.h): the daemon identity an engine's "host:<name>" reaches.
#include "common/host_device.h"

#include <gtest/gtest.h>

namespace fr {
namespace {

TEST(HostDevice, NamesBecomeDaemonIdentitiesAndBadNamesAreRefused) {
  EXPECT_EQ(*host_device_uuid(""), "host");
  EXPECT_EQ(*host_device_uuid("0"), "host-0");
  EXPECT_EQ(*host_device_uuid("gpu_1.a-b"), "host-gpu_1.a-b");
  for (const char* bad : {"a/b", "..", ".", "x y", "\n", "0123456789012345678901234567890123"}) {
    auto r = host_device_uuid(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
    EXPECT_NE(r.error().message.find("expected 1-32 characters"), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace fr
