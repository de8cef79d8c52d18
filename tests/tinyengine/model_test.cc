// The model's two promises: determinism, and sensitivity to every weight the forward pass reads.
#include "tinyengine/model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <thread>

#include "support/harness.h"
#include "tinyengine/checkpoint.h"

namespace fr::te {
namespace {

const std::string kPrompt = "The quick brown fox";

struct Loaded {
  CheckpointInfo info;
  DiskLoad disk;
  Model model;
};

Loaded load(const std::string& dir) {
  auto info = inspect_checkpoint(dir);
  EXPECT_TRUE(info.ok()) << info.error().to_string();
  auto disk = load_from_disk(*info);
  EXPECT_TRUE(disk.ok());
  Loaded l{*info, std::move(*disk), {}};
  auto m = Model::bind(l.info.config, l.disk.set.lookup());
  EXPECT_TRUE(m.ok()) << m.error().to_string();
  l.model = std::move(*m);
  return l;
}

std::string gen(const std::string& dir, ModelConfig c = {}, uint64_t seed = 3) {
  GenOptions o;
  o.config = c;
  o.seed = seed;
  auto files = generate_checkpoint(o, dir);
  EXPECT_TRUE(files.ok()) << files.error().to_string();
  return dir;
}

bool same(const Generation& a, const Generation& b) {
  if (a.steps.size() != b.steps.size()) return false;
  for (size_t i = 0; i < a.steps.size(); ++i) {
    if (a.steps[i].token != b.steps[i].token) return false;
    if (std::memcmp(&a.steps[i].logprob, &b.steps[i].logprob, sizeof(float)) != 0) return false;
  }
  return true;
}

TEST(TinyModel, SameWeightsAndPromptGiveIdenticalTokensAndLogprobs) {
  fr::test::TempDir d;
  auto a = load(gen(d.path()));
  auto b = load(d.path());  // a second, independent load of the same files
  const auto g1 = a.model.generate(tokenize(kPrompt), 16, 3);
  ASSERT_EQ(g1.steps.size(), 16u);
  EXPECT_TRUE(same(g1, a.model.generate(tokenize(kPrompt), 16, 3)));
  EXPECT_TRUE(same(g1, b.model.generate(tokenize(kPrompt), 16, 3)));
  Generation from_thread;
  std::thread t([&] { from_thread = a.model.generate(tokenize(kPrompt), 16, 3); });
  t.join();
  EXPECT_TRUE(same(g1, from_thread));
}

TEST(TinyModel, LogprobsAreNormalizedAndGreedy) {
  fr::test::TempDir d;
  auto a = load(gen(d.path()));
  const auto g = a.model.generate(tokenize(kPrompt), 4, 5);
  for (const auto& s : g.steps) {
    EXPECT_LT(s.logprob, 0.0f);
    ASSERT_EQ(s.top.size(), 5u);
    EXPECT_EQ(s.top[0].first, s.token);  // greedy: the chosen token is the most likely one
    EXPECT_EQ(s.top[0].second, s.logprob);
    for (size_t i = 1; i < s.top.size(); ++i) EXPECT_LE(s.top[i].second, s.top[i - 1].second);
  }
}

TEST(TinyModel, DifferentPromptsGiveDifferentAnswers) {
  fr::test::TempDir d;
  auto a = load(gen(d.path()));
  EXPECT_FALSE(same(a.model.generate(tokenize("abc"), 4, 0), a.model.generate(tokenize("abd"), 4, 0)));
}

// Indices of elements the forward pass reads for `prompt`: embedding rows of its tokens and positions,
// everything of every other tensor. A few per tensor: first, last and some in between.
std::vector<int64_t> read_elements(const TensorSpec& s, const std::vector<int>& prompt) {
  const int64_t n = s.numel();
  const int64_t row = s.shape.size() == 2 ? s.shape[1] : n;
  std::vector<int64_t> rows;
  if (s.name == "tok_emb") rows = {prompt.front(), prompt.back(), prompt[prompt.size() / 2]};
  else if (s.name == "pos_emb") rows = {0, static_cast<int64_t>(prompt.size()) - 1, 1};
  if (!rows.empty()) return {rows[0] * row, rows[1] * row + row - 1, rows[2] * row + row / 2};
  return {0, n - 1, n / 2, (n * 7) / 13};
}

void perturb(std::byte* p, int64_t i, DType dt, float delta) {
  if (dt == DType::kF32) {
    float v;
    std::memcpy(&v, p + i * 4, 4);
    v += delta;
    std::memcpy(p + i * 4, &v, 4);
  } else {
    uint16_t b;
    std::memcpy(&b, p + i * 2, 2);
    uint32_t bits = static_cast<uint32_t>(b) << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    v += delta;
    std::memcpy(&bits, &v, 4);
    b = static_cast<uint16_t>(bits >> 16);  // truncation is fine: delta is large
    std::memcpy(p + i * 2, &b, 2);
  }
}

void expect_every_weight_matters(DType dtype) {
  fr::test::TempDir d;
  ModelConfig c;
  c.dtype = dtype;
  auto l = load(gen(d.path(), c));
  const auto prompt = tokenize(kPrompt);
  const auto base = l.model.generate(prompt, 4, 0);
  std::set<std::string> covered;
  for (const auto& spec : tensor_specs(l.info.config)) {
    std::byte* p = l.disk.mutable_data(spec.name);
    ASSERT_NE(p, nullptr) << spec.name;
    for (int64_t i : read_elements(spec, prompt)) {
      std::vector<std::byte> saved(p, p + l.disk.set.tensors.at(spec.name).nbytes);
      perturb(p, i, dtype, 0.5f);
      EXPECT_FALSE(same(base, l.model.generate(prompt, 4, 0))) << spec.name << "[" << i << "] changed nothing";
      std::memcpy(p, saved.data(), saved.size());
    }
    covered.insert(spec.name);
  }
  EXPECT_TRUE(same(base, l.model.generate(prompt, 4, 0)));  // restored
  EXPECT_EQ(covered.size(), l.disk.set.tensors.size());      // every tensor in the checkpoint
}

TEST(TinyModel, ChangingAnyReadWeightChangesTheAnswerF32) { expect_every_weight_matters(DType::kF32); }
TEST(TinyModel, ChangingAnyReadWeightChangesTheAnswerBF16) { expect_every_weight_matters(DType::kBF16); }

TEST(TinyModel, BindRejectsMissingWrongShapeAndWrongDtype) {
  fr::test::TempDir d;
  auto l = load(gen(d.path()));
  auto set = l.disk.set.tensors;
  auto lookup = [&](const std::string& n) -> const TensorView* {
    auto it = set.find(n);
    return it == set.end() ? nullptr : &it->second;
  };
  set.erase("lm_head");
  auto r = Model::bind(l.info.config, lookup);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("lm_head"), std::string::npos);
  set = l.disk.set.tensors;
  set["layers.1.wq"].shape = {32, 128};
  EXPECT_FALSE(Model::bind(l.info.config, lookup).ok());
  set = l.disk.set.tensors;
  set["final_norm"].dtype = DType::kBF16;
  EXPECT_FALSE(Model::bind(l.info.config, lookup).ok());
}

TEST(TinyModel, ConfigJsonRoundTripsAndRejectsNonsense) {
  ModelConfig c;
  c.n_layers = 3;
  c.dtype = DType::kBF16;
  auto back = ModelConfig::from_json(c.to_json());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->to_json(), c.to_json());
  EXPECT_FALSE(ModelConfig::from_json("[]").ok());
  EXPECT_FALSE(ModelConfig::from_json(R"({"arch":"llama"})").ok());
  c.n_heads = 5;  // does not divide 64
  EXPECT_FALSE(c.validate().ok());
}

TEST(TinyModel, ByteTokenizerRoundTrips) {
  const std::string s = std::string("h\xC3\xA9llo\n", 7);
  EXPECT_EQ(detokenize(tokenize(s)), s);
  EXPECT_EQ(token_name('a'), "a");
  EXPECT_EQ(token_name(10), "<0x0A>");
  EXPECT_EQ(token_name(kEos), "</s>");
}

}  // namespace
}  // namespace fr::te
