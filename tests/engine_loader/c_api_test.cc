#include "fastrestart/engine_loader_c.h"

#include <gtest/gtest.h>

#include <cstring>

#include "support/harness.h"

namespace {

TEST(CApi, PublishThenAttach) {
  fr::test::TempDir d;
  auto ck = fr::test::make_checkpoint(d.path(), 1, 2, 4096, 5);
  fr::test::Daemon daemon(d / "run");
  std::string dir = d / "run";
  fr_options_t o;
  fr_options_init(&o);
  o.socket_dir = dir.c_str();
  o.fallback = 0;
  const char* files[] = {ck.files[0].c_str()};
  const char* config[] = {"arch=c", "tp_size=1"};
  char err[256] = {};

  fr_weights_t* w = nullptr;
  o.fallback = 1;
  fr_key_t* key = nullptr;
  ASSERT_EQ(fr_key_identify(files, 1, config, 2, &key, err, sizeof err), FR_OK) << err;
  EXPECT_EQ(std::strlen(fr_key_fingerprint(key)), 16u);
  EXPECT_EQ(fr_attach_key(key, &o, &w, err, sizeof err), FR_MISS);
  EXPECT_STREQ(err, "no entries");

  std::vector<int64_t> shape{1024};
  std::vector<float> data(1024);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) * 0.5f;
  fr_tensor_t t{"w", "F32", 1, shape.data(), nullptr, data.data(), data.size() * 4};
  ASSERT_EQ(fr_publish_key(key, &t, 1, &o, err, sizeof err), FR_OK) << err;
  fr_key_release(key);

  ASSERT_EQ(fr_attach(files, 1, config, 2, &o, &w, err, sizeof err), FR_OK) << err;
  ASSERT_EQ(fr_weights_count(w), 1u);
  fr_tensor_t got;
  ASSERT_EQ(fr_weights_tensor(w, 0, &got), FR_OK);
  EXPECT_STREQ(got.name, "w");
  EXPECT_STREQ(got.dtype, "F32");
  EXPECT_EQ(got.ndim, 1);
  EXPECT_EQ(got.strides[0], 1);
  EXPECT_EQ(std::memcmp(got.data, data.data(), 4096), 0);
  EXPECT_EQ(std::strlen(fr_weights_digest(w)), 16u);
  EXPECT_EQ(fr_weights_tensor(w, 1, &got), FR_EINVAL);
  fr_weights_release(w);

  const char* bad_config[] = {"novalue"};
  EXPECT_EQ(fr_attach(files, 1, bad_config, 1, &o, &w, err, sizeof err), FR_EINVAL);
  EXPECT_NE(std::strstr(err, "novalue"), nullptr);
}

// The key is taken before the read; a file replaced before the publish is refused, naming it, and the
// daemon stores nothing under either identity.
TEST(CApi, PublishRefusesAFileChangedAfterItsKeyWasTaken) {
  fr::test::TempDir d;
  auto ck = fr::test::make_checkpoint(d.path(), 1, 2, 4096, 5);
  fr::test::Daemon daemon(d / "run");
  std::string dir = d / "run";
  fr_options_t o;
  fr_options_init(&o);
  o.socket_dir = dir.c_str();
  const char* files[] = {ck.files[0].c_str()};
  const char* config[] = {"arch=c"};
  char err[512] = {};
  fr_key_t* key = nullptr;
  ASSERT_EQ(fr_key_identify(files, 1, config, 1, &key, err, sizeof err), FR_OK) << err;
  fr::test::replace_by_rename(ck.files[0]);
  std::vector<int64_t> shape{4};
  float data[4] = {1, 2, 3, 4};
  fr_tensor_t t{"w", "F32", 1, shape.data(), nullptr, data, sizeof data};
  EXPECT_EQ(fr_publish_key(key, &t, 1, &o, err, sizeof err), FR_EFAIL);
  EXPECT_NE(std::strstr(err, ck.files[0].c_str()), nullptr) << err;
  EXPECT_NE(std::strstr(err, "ino differs"), nullptr) << err;
  fr_key_release(key);
  fr_weights_t* w = nullptr;
  EXPECT_EQ(fr_attach(files, 1, config, 1, &o, &w, err, sizeof err), FR_MISS);
  EXPECT_STREQ(err, "no entries");
}

}  // namespace
