// The tiny model: a byte-level decoder-only transformer with a real forward pass (docs/tinyengine.md,
// "The model").
//
// Tokens are bytes 0..255 plus kEos (256). Per position: h = tok_emb[x] + pos_emb[t]; n_layers blocks of
// pre-norm multi-head causal attention and a SiLU MLP; then `extra_blocks` wide residual SiLU MLPs (how a
// large checkpoint makes every byte count); final RMSNorm and lm_head. Greedy decoding, log-probabilities
// from a log-softmax in double precision.
//
// Determinism: one request runs on one thread with a fixed order of operations, so the same weights and
// prompt give bit-identical tokens and log-probabilities on every run and every thread.
// Ownership: Model holds pointers into memory it does not own (a disk buffer or an attached pool); the
// owner must outlive it. A Model is immutable after bind() and may be used from many threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "fastrestart/result.h"

namespace fr::te {

class KvCache;
inline constexpr int kVocab = 257;
inline constexpr int kEos = 256;

struct ModelConfig {
  int d_model = 64;
  int n_heads = 4;
  int n_layers = 2;
  int d_ff = 128;
  int max_seq = 256;
  int extra_blocks = 1;
  int64_t extra_width = 128;
  DType dtype = DType::kF32;  // kF32 or kBF16

  std::string to_json() const;
  static Result<ModelConfig> from_json(const std::string& text);
  Status validate() const;
};

// The name and shape of every tensor of a model with this config, in the order the generator writes them.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t fan_in = 1;  // for the generator's init scale
  enum class Init { kUniform, kOnes, kSmallUniform } init = Init::kUniform;
  int64_t numel() const;
};
std::vector<TensorSpec> tensor_specs(const ModelConfig& c);
uint64_t total_weight_bytes(const ModelConfig& c);

// Tensor parallelism (docs/tinyengine.md, "Tensor parallel"): the extra blocks, where a large checkpoint's
// bytes are, are split over the ranks Megatron-style: each rank holds rows [lo, hi) of every `up` and the
// same columns of every `down`, so its partial outputs sum to the whole block's. Rank 0 also holds every
// other tensor and runs the rest of the forward; the other ranks hold only their slices.
struct TpPlan {
  int size = 1;
  int rank = 0;
};
// The rank's slice [lo, hi) of a width split into `size` near-equal parts.
std::pair<int64_t, int64_t> extra_slice(int64_t width, const TpPlan& tp);
// The tensors rank `tp.rank` holds, with their shard shapes (tensor_specs(c) for size 1).
std::vector<TensorSpec> tensor_specs(const ModelConfig& c, const TpPlan& tp);
uint64_t rank_weight_bytes(const ModelConfig& c, const TpPlan& tp);
// Why `tp` cannot split `c` (size 1..8, at least one extra block, extra_width >= size), or OK.
Status check_tp(const ModelConfig& c, const TpPlan& tp);
// Adds the other ranks' partial outputs of extra block `block` for its normalised input `a` (d_model
// floats) to `out` (d_model floats holding this rank's partial), in rank order (deterministic).
using TpReduce = std::function<Status(int block, const float* a, float* out, int d_model)>;

// A tensor as the loader found it, handed to Model::bind.
struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  uint64_t nbytes = 0;
};
using TensorLookup = std::function<const TensorView*(const std::string& name)>;

struct Step {
  int token = 0;
  float logprob = 0;
  std::vector<std::pair<int, float>> top;  // top-k alternatives, best first (empty unless asked)
};

struct Generation {
  std::vector<Step> steps;
  bool stopped_on_eos = false;
  std::string error;  // set when a device failed mid-way (CUDA forward); steps are then incomplete
};

// Checks every tensor of `config` through `lookup` (presence, dtype, shape, size, alignment) and returns
// their pointers by name. The pointers are not dereferenced (they may be device pointers).
Result<std::map<std::string, const void*>> check_tensors(const ModelConfig& config, const TensorLookup& lookup,
                                                         const TpPlan& tp = {});

// Greedy choice over `logits` (kVocab values): the first maximum, its log-probability (log-softmax in
// double), and the `top_k` best alternatives. Shared by the CPU and CUDA forwards.
Step greedy_step(const float* logits, int top_k);

// The greedy decode both forwards run once the prompt's n tokens are in: a greedy_step over `logits()` (the
// last position's), then the chosen token fed back at position n + i by `step(token, position)`, until
// max_tokens steps, EOS (g.stopped_on_eos) or max_seq positions; `step` returning false (the forward
// failed, the caller says why) ends it too.
template <class Logits, class StepFn>
void greedy_decode(Generation& g, int n, int max_tokens, int top_k, int max_seq, Logits logits, StepFn step) {
  for (int i = 0; i < max_tokens; ++i) {
    Step s = greedy_step(logits(), top_k);
    const int best = s.token;
    g.steps.push_back(std::move(s));
    if (best == kEos) {
      g.stopped_on_eos = true;
      return;
    }
    const int t = n + i;
    if (i + 1 >= max_tokens || t >= max_seq || !step(best, t)) return;
  }
}

class Model {
 public:
  // Binds every tensor of `config` through `lookup`; checks presence, dtype, shape, size and alignment.
  static Result<Model> bind(const ModelConfig& config, const TensorLookup& lookup);
  // The tensors of rank `tp.rank` (tensor_specs(config, tp)). Rank 0 generates, calling `reduce` at every
  // extra block; the other ranks only answer extra_partial().
  static Result<Model> bind(const ModelConfig& config, const TensorLookup& lookup, const TpPlan& tp, TpReduce reduce);

  const ModelConfig& config() const { return m_config; }
  const TpPlan& tp() const { return m_tp; }

  // out[d_model] = this rank's partial output of extra block `block` for input a[d_model].
  void extra_partial(int block, const float* a, float* out) const;

  // Greedy decoding of up to `max_tokens` tokens after `prompt` (1..max_seq tokens, each 0..kEos; the
  // caller checks prompt.size() + max_tokens <= max_seq). Stops early on kEos. `top_k` alternatives are
  // reported per step (0 for none). With `cache` (the paged prefix cache, docs/kv-survival.md) the prompt's
  // cached prefix is not computed again and the K/V rows go to the cache's blocks; the answer is
  // bit-identical to the uncached one.
  Generation generate(const std::vector<int>& prompt, int max_tokens, int top_k, KvCache* cache = nullptr) const;

 private:
  struct Layer {
    const void *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *w_up, *w_down;
  };
  struct Extra {
    const void *up, *down;
  };
  ModelConfig m_config;
  const void* m_tok_emb = nullptr;
  const void* m_pos_emb = nullptr;
  std::vector<Layer> m_layers;
  std::vector<Extra> m_extras;
  const void* m_final_norm = nullptr;
  const void* m_lm_head = nullptr;
  TpPlan m_tp;
  TpReduce m_reduce;

  friend class ForwardState;
};

// Byte-level tokenizer: a string's bytes are its tokens.
std::vector<int> tokenize(const std::string& text);
// The bytes of `tokens`, kEos dropped.
std::string detokenize(const std::vector<int>& tokens);
// A printable name for one token: the character if printable ASCII, "<0xNN>" otherwise, "</s>" for kEos.
std::string token_name(int token);

}  // namespace fr::te
