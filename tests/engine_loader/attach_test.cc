#include <gtest/gtest.h>

#include "fastrestart/engine_loader.h"
#include "support/harness.h"

namespace fastrestart {
namespace {

TEST(Attach, NoDaemonIsAMissWithAReasonUnderFallback) {
  fr::test::TempDir d;
  auto ck = fr::test::make_checkpoint(d.path(), 1, 1, 1000, 1);
  Options o;
  o.socket_dir = d / "nowhere";
  o.connect_timeout_s = 0.2;
  auto r = attach({ck.files, {}}, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->hit);
  EXPECT_NE(r->reason.find("does not exist and no daemon is starting"), std::string::npos) << r->reason;
}

TEST(Attach, NoDaemonIsAnErrorWithoutFallback) {
  fr::test::TempDir d;
  auto ck = fr::test::make_checkpoint(d.path(), 1, 1, 1000, 1);
  Options o;
  o.socket_dir = d / "nowhere";
  o.connect_timeout_s = 0.2;
  o.fallback = false;
  auto r = attach({ck.files, {}}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kNotFound);
}

TEST(Attach, ArgumentErrorsStayErrors) {
  Options o;
  auto r = attach({{"/does/not/exist.safetensors"}, {}}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("/does/not/exist.safetensors"), std::string::npos);
  fr::test::TempDir d;
  auto ck = fr::test::make_checkpoint(d.path(), 1, 1, 1000, 1);
  o.device = "gpu7";
  r = attach({ck.files, {}}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("gpu7"), std::string::npos);
  o.device = "host";
  o.state_timeout_s = -1;
  EXPECT_FALSE(attach({ck.files, {}}, o).ok());
}

TEST(Attach, CudaDeviceWithoutDriverIsAMissUnderFallback) {
  fr::test::TempDir d;
  auto ck = fr::test::make_checkpoint(d.path(), 1, 1, 1000, 1);
  Options o;
  o.device = "cuda:0";
  o.socket_dir = d / "run";
  o.connect_timeout_s = 0.2;
  auto r = attach({ck.files, {}}, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->hit);
  EXPECT_FALSE(r->reason.empty());
}

TEST(Attach, VerifyDetectsNothingWrongOnAHealthyEntry) {
  fr::test::TempDir d;
  auto ck = fr::test::make_checkpoint(d.path(), 2, 2, 100000, 3);
  std::vector<std::string> args;
  for (const auto& f : ck.files) args.insert(args.end(), {"--preload", f});
  fr::test::Daemon daemon(d / "run", args);
  Options o;
  o.socket_dir = d / "run";
  o.verify = true;
  o.fallback = false;
  auto r = attach({ck.files, {}}, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->hit);
  EXPECT_GT(r->timings.verify_s, 0.0);
  EXPECT_EQ(r->weights->digest().size(), 16u);
}

}  // namespace
}  // namespace fastrestart
