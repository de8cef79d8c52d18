#include "daemon/preload.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/digest.h"
#include "support/harness.h"

namespace fr::daemon {
namespace {

class PoolView {
 public:
  // Reads the pool back through a descriptor, as a client would.
  static std::vector<std::byte> read(Pool& p, uint64_t n) {
    auto fd = p.share_fd();
    EXPECT_TRUE(fd.ok());
    std::vector<std::byte> out(n);
    EXPECT_EQ(::pread(fd->get(), out.data(), n, 0), static_cast<ssize_t>(n));
    return out;
  }
};

TEST(Preload, PlacesEveryTensorAndHashesEveryByte) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 3, 5, 300000, 11);
  auto plan = plan_preload(ck.files, {}, std::nullopt);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  ASSERT_EQ(plan->slots.size(), 15u);
  auto made = make_host_backend();
  ASSERT_TRUE(made.ok());
  auto& backend = *made;
  auto pool = backend->allocate(plan->data_bytes);
  ASSERT_TRUE(pool.ok());
  Progress progress;
  std::atomic<bool> cancel{false};
  auto digest = run_preload(*plan, **pool, progress, cancel, 4);
  ASSERT_TRUE(digest.ok()) << digest.error().message;
  EXPECT_EQ(progress.done_bytes.load(), plan->data_bytes);
  auto bytes = PoolView::read(**pool, plan->data_bytes);
  EXPECT_EQ(*digest, digest_of(bytes.data(), bytes.size()));
  for (const auto& s : plan->slots) {
    const auto& want = ck.tensors.at(s.spec.name);
    ASSERT_EQ(s.nbytes, want.size());
    EXPECT_EQ(std::memcmp(bytes.data() + s.offset, want.data(), want.size()), 0) << s.spec.name;
  }
}

TEST(Preload, SelectsTensorsAndChecksDtype) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 4, 1000, 1);
  auto plan = plan_preload(ck.files, {"model.layers.2.weight"}, DType::kF32);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->slots.size(), 1u);
  auto bad = plan_preload(ck.files, {}, DType::kBF16);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("not the requested BF16"), std::string::npos) << bad.error().message;
  auto missing = plan_preload(ck.files, {"nope"}, std::nullopt);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("'nope'"), std::string::npos);
}

TEST(Preload, RejectsDuplicateTensorsAcrossFiles) {
  test::TempDir a, b;
  auto ck1 = test::make_checkpoint(a.path(), 1, 2, 1000, 1);
  auto ck2 = test::make_checkpoint(b.path(), 1, 2, 1000, 2);
  auto plan = plan_preload({ck1.files[0], ck2.files[0]}, {}, std::nullopt);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().message.find("also appears"), std::string::npos);
}

TEST(Preload, CancelStopsTheLoad) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 2, 1 << 20, 3);
  auto plan = plan_preload(ck.files, {}, std::nullopt);
  ASSERT_TRUE(plan.ok());
  auto pool = make_host_backend().value()->allocate(plan->data_bytes);
  Progress progress;
  std::atomic<bool> cancel{true};
  auto r = run_preload(*plan, **pool, progress, cancel, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kCancelled);
}

}  // namespace
}  // namespace fr::daemon
