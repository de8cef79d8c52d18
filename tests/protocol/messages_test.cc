#include "protocol/messages.h"

#include <gtest/gtest.h>

namespace fr::proto {
namespace {

Key sample_key() {
  Key k;
  k.files.push_back({"/m/a.safetensors", 1, 2, 3, 4, 5});
  k.files.push_back({"/m/b.safetensors", 1, 6, 7, 8, 9});
  k.config = {{"arch", "Llama"}, {"dtype", "bfloat16"}};
  return k;
}

TEST(Messages, KeyRoundTripAndFingerprintIsStable) {
  Key k = sample_key();
  auto back = key_from_json(to_json(k), "key");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, k);
  EXPECT_EQ(back->fingerprint(), k.fingerprint());
  EXPECT_EQ(k.fingerprint().size(), 16u);
  Key k2 = k;
  k2.config["dtype"] = "float16";
  EXPECT_NE(k2.fingerprint(), k.fingerprint());
}

TEST(Messages, DifferencesNameTheFields) {
  Key a = sample_key(), b = sample_key();
  b.files[1].ctime_ns += 1;
  b.files[0].ino = 99;
  b.config["dtype"] = "float16";
  b.config["extra"] = "1";
  auto d = key_differences(a, b);
  EXPECT_EQ(d, (std::vector<std::string>{"files[0].ino", "files[1].ctime_ns", "config.dtype", "config.extra"}));
  b.files.pop_back();
  EXPECT_EQ(key_differences(a, b).front(), "files.count");
}

TEST(Messages, KeyDecodingNamesTheBadField) {
  json j = to_json(sample_key());
  j["files"][1]["size"] = -3;
  auto r = key_from_json(j, "attach.key");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "attach.key.files[1].size: not an unsigned integer");
  j = to_json(sample_key());
  j["config"]["tp"] = 2;
  r = key_from_json(j, "attach.key");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "attach.key.config.tp: not a string");
  EXPECT_FALSE(key_from_json(json::array(), "k").ok());
}

TEST(Messages, ManifestRoundTripAndValidation) {
  std::vector<TensorSpec> specs{{"a", DType::kBF16, {3, 5}}, {"b", DType::kF32, {7}}};
  Manifest m;
  m.fingerprint = "0123456789abcdef";
  m.data_bytes = layout_tensors(specs, &m.tensors);
  EXPECT_EQ(m.tensors[1].offset, 256u);
  EXPECT_EQ(m.data_bytes, 256u + 28u);
  m.pool_bytes = 4096;
  m.digest = 0x1234;
  m.digest_chunk = 65536;
  m.source = "publish";
  m.backend = "host";
  m.gpu_uuid = "host";
  auto back = manifest_from_json(to_json(m), "manifest");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->tensors.size(), 2u);
  EXPECT_EQ(*back->digest, 0x1234u);

  json bad = to_json(m);
  bad["tensors"][1]["offset"] = 4000;
  EXPECT_FALSE(manifest_from_json(bad, "manifest").ok());
  bad = to_json(m);
  bad["tensors"][0]["nbytes"] = 31;
  auto r = manifest_from_json(bad, "manifest");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("manifest.tensors[0].nbytes"), std::string::npos);
  bad = to_json(m);
  bad["data_bytes"] = 5000;
  EXPECT_FALSE(manifest_from_json(bad, "manifest").ok());
}

}  // namespace
}  // namespace fr::proto
