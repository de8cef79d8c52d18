// The generator: deterministic bytes, a chosen size, shards; and the reader's checks.
#include "tinyengine/checkpoint.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "support/harness.h"

namespace fr::te {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(TinyCheckpoint, SameSeedWritesIdenticalFilesOtherSeedDoesNot) {
  fr::test::TempDir a, b, c;
  GenOptions o;
  auto fa = generate_checkpoint(o, a.path());
  auto fb = generate_checkpoint(o, b.path());
  o.seed = 2;
  auto fc = generate_checkpoint(o, c.path());
  ASSERT_TRUE(fa.ok() && fb.ok() && fc.ok());
  ASSERT_EQ(fa->size(), 1u);
  EXPECT_EQ(slurp(fa->at(0)), slurp(fb->at(0)));
  EXPECT_NE(slurp(fa->at(0)), slurp(fc->at(0)));
  EXPECT_LT(slurp(fa->at(0)).size(), 4u << 20);  // tiny: KBs to a few MB
}

TEST(TinyCheckpoint, SizeTargetAddsWideBlocksOfBoundedTensors) {
  ModelConfig base;
  for (uint64_t target : {8ull << 20, 2ull << 30, 16ull << 30}) {
    const ModelConfig c = config_for_size(base, target);
    const double total = static_cast<double>(total_weight_bytes(c));
    EXPECT_NEAR(total / static_cast<double>(target), 1.0, 0.01) << target;
    for (const auto& s : tensor_specs(c)) EXPECT_LE(s.numel() * 4, 256 << 20) << s.name;
    EXPECT_TRUE(c.validate().ok());
  }
  EXPECT_EQ(config_for_size(base, 1000).extra_blocks, base.extra_blocks);  // below base size: unchanged
}

TEST(TinyCheckpoint, ShardsLoadAsOneCheckpoint) {
  fr::test::TempDir d;
  GenOptions o;
  o.config = config_for_size(o.config, 6u << 20);
  o.shard_bytes = 2u << 20;
  auto files = generate_checkpoint(o, d.path());
  ASSERT_TRUE(files.ok()) << files.error().to_string();
  EXPECT_GE(files->size(), 3u);
  auto info = inspect_checkpoint(d.path());
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  EXPECT_EQ(info->files, *files);
  EXPECT_EQ(info->config.to_json(), o.config.to_json());
  auto disk = load_from_disk(*info);
  ASSERT_TRUE(disk.ok());
  auto m = Model::bind(info->config, disk->set.lookup());
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(m->generate(tokenize("hi there"), 3, 0).steps.size(), 3u);
}

TEST(TinyCheckpoint, ParseSize) {
  EXPECT_EQ(*parse_size("2G"), 2ull << 30);
  EXPECT_EQ(*parse_size("512M"), 512ull << 20);
  EXPECT_EQ(*parse_size("64KiB"), 64ull << 10);
  EXPECT_EQ(*parse_size("1000"), 1000ull);
  EXPECT_FALSE(parse_size("").ok());
  EXPECT_FALSE(parse_size("G").ok());
  EXPECT_FALSE(parse_size("3X").ok());
}

TEST(TinyCheckpoint, ReaderRejectsMissingConfigAndMissingFiles) {
  fr::test::TempDir d;
  std::vector<float> w(4, 1.0f);
  std::vector<TensorData> t = {{"x", DType::kF32, {4}, std::as_bytes(std::span(w))}};
  ASSERT_TRUE(write_safetensors(d / "model.safetensors", t).ok());
  auto r = inspect_checkpoint(d.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find(kConfigKey), std::string::npos);
  EXPECT_EQ(inspect_checkpoint(d / "nope").error().code, Errc::kNotFound);
}

}  // namespace
}  // namespace fr::te
