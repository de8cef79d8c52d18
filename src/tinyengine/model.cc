#include "tinyengine/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include <nlohmann/json.hpp>

#include "tinyengine/kv_cache.h"

namespace fr::te {
namespace {

float bf16_to_f32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// One element of a weight tensor of either supported dtype.
struct Weights {
  const void* p;
  bool bf16;
  float at(int64_t i) const {
    return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
  }
};

// Dot product of row `row` (length n) of `w` with x. Eight partial sums in a fixed order: deterministic.
template <typename T>
float dot_row(const T* w, const float* x, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      if constexpr (std::is_same_v<T, uint16_t>)
        s[k] += bf16_to_f32(w[i + k]) * x[i + k];
      else
        s[k] += w[i + k] * x[i + k];
    }
  float tail = 0;
  for (; i < n; ++i) {
    if constexpr (std::is_same_v<T, uint16_t>)
      tail += bf16_to_f32(w[i]) * x[i];
    else
      tail += w[i] * x[i];
  }
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + tail;
}

// y[out] = W[out, in] x[in]
void matvec(const void* w, bool bf16, const float* x, float* y, int64_t out, int64_t in) {
  for (int64_t o = 0; o < out; ++o)
    y[o] = bf16 ? dot_row(static_cast<const uint16_t*>(w) + o * in, x, in)
                : dot_row(static_cast<const float*>(w) + o * in, x, in);
}

void rmsnorm(const float* x, const void* gain, bool bf16, float* y, int n) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  auto inv = static_cast<float>(1.0 / std::sqrt(ss / n + 1e-5));
  Weights g{gain, bf16};
  for (int i = 0; i < n; ++i) y[i] = x[i] * inv * (gain ? g.at(i) : 1.0f);
}

float silu(float v) { return v / (1.0f + std::exp(-v)); }

}  // namespace

// The per-request state: the KV rows and scratch buffers. Runs one position at a time. With a block table
// (`seq`, the paged cache) positions [0, m_paged) live in its blocks, the first seq->cached() of them found
// in the prefix index; positions past a block the cache could not give live in private rows. Where a row
// lives changes no arithmetic, so answers are bit-identical with and without the cache.
class ForwardState {
 public:
  ForwardState(const Model& m, KvCache::Seq* seq)
      : m_m(m), m_c(m.m_config), m_bf16(m_c.dtype == DType::kBF16), m_seq(seq), m_paged(seq ? seq->cached() : 0) {
    const auto d = static_cast<size_t>(m_c.d_model);
    m_k.assign(static_cast<size_t>(m_c.n_layers), std::vector<float>(static_cast<size_t>(m_c.max_seq) * d));
    m_v = m_k;
    m_h.resize(d);
    m_a.resize(d);
    m_q.resize(d);
    m_att.resize(d);
    m_tmp.resize(d);
    m_ff.resize(static_cast<size_t>(std::max<int64_t>(m_c.d_ff, m_c.extra_width)));
    m_scores.resize(static_cast<size_t>(m_c.max_seq));
    m_logits.resize(kVocab);
  }

  // Runs position `t` with input `token`; fills logits() when `want_logits`.
  void step(int token, int t, bool want_logits) {
    const int d = m_c.d_model;
    const int hd = d / m_c.n_heads;
    if (m_seq && t == m_paged && m_seq->ensure(t)) m_paged = t + 1;
    Weights tok{m_m.m_tok_emb, m_bf16}, pos{m_m.m_pos_emb, m_bf16};
    for (int i = 0; i < d; ++i)
      m_h[i] = tok.at(static_cast<int64_t>(token) * d + i) + pos.at(static_cast<int64_t>(t) * d + i);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (size_t l = 0; l < m_m.m_layers.size(); ++l) {
      const auto& L = m_m.m_layers[l];
      rmsnorm(m_h.data(), L.attn_norm, m_bf16, m_a.data(), d);
      matvec(L.wq, m_bf16, m_a.data(), m_q.data(), d, d);
      matvec(L.wk, m_bf16, m_a.data(), row(l, 0, t), d, d);
      matvec(L.wv, m_bf16, m_a.data(), row(l, 1, t), d, d);
      for (int h = 0; h < m_c.n_heads; ++h) {
        const int off = h * hd;
        float mx = -INFINITY;
        for (int s = 0; s <= t; ++s) {
          float dotv = 0;
          const float* kr = row(l, 0, s);
          for (int i = 0; i < hd; ++i) dotv += m_q[off + i] * kr[off + i];
          m_scores[s] = dotv * scale;
          mx = std::max(mx, m_scores[s]);
        }
        float sum = 0;
        for (int s = 0; s <= t; ++s) sum += (m_scores[s] = std::exp(m_scores[s] - mx));
        for (int i = 0; i < hd; ++i) m_att[off + i] = 0;
        for (int s = 0; s <= t; ++s) {
          const float p = m_scores[s] / sum;
          const float* vr = row(l, 1, s);
          for (int i = 0; i < hd; ++i) m_att[off + i] += p * vr[off + i];
        }
      }
      matvec(L.wo, m_bf16, m_att.data(), m_tmp.data(), d, d);
      for (int i = 0; i < d; ++i) m_h[i] += m_tmp[i];
      mlp(L.mlp_norm, L.w_up, L.w_down, m_c.d_ff);
    }
    if (m_seq && t < m_paged) m_seq->done(t, token);  // every layer's rows of t are written
    if (!want_logits) return;
    // The extra blocks and the head only matter where logits are read: the last layer's output at other
    // positions feeds nothing (the KV cache holds what later positions need).
    if (m_m.m_tp.size == 1) {
      for (const auto& e : m_m.m_extras) mlp(nullptr, e.up, e.down, m_c.extra_width);
    } else {
      for (size_t e = 0; e < m_m.m_extras.size() && m_error.empty(); ++e) tp_extra(static_cast<int>(e));
    }
    rmsnorm(m_h.data(), m_m.m_final_norm, m_bf16, m_a.data(), d);
    matvec(m_m.m_lm_head, m_bf16, m_a.data(), m_logits.data(), kVocab, d);
  }

  const std::vector<float>& logits() const { return m_logits; }
  const std::string& error() const { return m_error; }

 private:
  // Row `kind` (0: K, 1: V) of layer l at position s.
  float* row(size_t l, int kind, int s) {
    if (s < m_paged) return m_seq->row(static_cast<int>(l), kind, s);
    return (kind == 0 ? m_k : m_v)[l].data() + static_cast<size_t>(s) * static_cast<size_t>(m_c.d_model);
  }

  // The tensor-parallel extra block: this rank's partial plus the others' (Model::m_reduce), then the residual.
  void tp_extra(int e) {
    const int d = m_c.d_model;
    rmsnorm(m_h.data(), nullptr, m_bf16, m_a.data(), d);
    m_m.extra_partial(e, m_a.data(), m_tmp.data());
    if (auto s = m_m.m_reduce(e, m_a.data(), m_tmp.data(), d); !s) {
      m_error = s.error().message;
      return;
    }
    for (int i = 0; i < d; ++i) m_h[i] += m_tmp[i];
  }

  // h += down(silu(up(rmsnorm(h) * gain)))
  void mlp(const void* gain, const void* up, const void* down, int64_t width) {
    const int d = m_c.d_model;
    rmsnorm(m_h.data(), gain, m_bf16, m_a.data(), d);
    matvec(up, m_bf16, m_a.data(), m_ff.data(), width, d);
    for (int64_t i = 0; i < width; ++i) m_ff[static_cast<size_t>(i)] = silu(m_ff[static_cast<size_t>(i)]);
    matvec(down, m_bf16, m_ff.data(), m_tmp.data(), d, width);
    for (int i = 0; i < d; ++i) m_h[i] += m_tmp[i];
  }

  const Model& m_m;
  const ModelConfig& m_c;
  bool m_bf16;
  KvCache::Seq* m_seq;
  int m_paged;
  std::vector<std::vector<float>> m_k, m_v;
  std::vector<float> m_h, m_a, m_q, m_att, m_tmp, m_ff, m_scores, m_logits;
  std::string m_error;  // a tensor-parallel reduce failed: the logits are not valid
};

std::string ModelConfig::to_json() const {
  nlohmann::json j = {{"arch", "tinyengine"},  {"d_model", d_model},         {"n_heads", n_heads},
                      {"n_layers", n_layers},  {"d_ff", d_ff},               {"max_seq", max_seq},
                      {"vocab", kVocab},       {"extra_blocks", extra_blocks}, {"extra_width", extra_width},
                      {"dtype", dtype_name(dtype)}};
  return j.dump();
}

Result<ModelConfig> ModelConfig::from_json(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return make_error(Errc::kCorrupt, "model config is not a JSON object");
  ModelConfig c;
  auto get_int = [&](const char* k, auto& out) -> Status {
    if (!j.contains(k) || !j[k].is_number_integer())
      return make_error(Errc::kCorrupt, std::string("model config: '") + k + "' missing or not an integer");
    out = j[k].get<std::remove_reference_t<decltype(out)>>();
    return {};
  };
  if (j.value("arch", "") != "tinyengine") return make_error(Errc::kCorrupt, "model config: arch is not 'tinyengine'");
  if (j.value("vocab", 0) != kVocab) return make_error(Errc::kCorrupt, "model config: vocab is not 257");
  for (auto [k, out] : {std::pair{"d_model", &c.d_model}, std::pair{"n_heads", &c.n_heads},
                        std::pair{"n_layers", &c.n_layers}, std::pair{"d_ff", &c.d_ff}, std::pair{"max_seq", &c.max_seq},
                        std::pair{"extra_blocks", &c.extra_blocks}})
    FR_TRY(get_int(k, *out));
  FR_TRY(get_int("extra_width", c.extra_width));
  auto dt = dtype_from_name(j.value("dtype", ""));
  if (!dt) return make_error(Errc::kCorrupt, "model config: unknown dtype");
  c.dtype = *dt;
  FR_TRY(c.validate());
  return c;
}

Status ModelConfig::validate() const {
  auto bad = [](const std::string& m) { return make_error(Errc::kInvalidArgument, "model config: " + m); };
  if (d_model < 8 || d_model > 8192) return bad("d_model must be 8..8192");
  if (n_heads < 1 || d_model % n_heads != 0) return bad("n_heads must divide d_model");
  if (n_layers < 1 || n_layers > 256) return bad("n_layers must be 1..256");
  if (d_ff < 1 || d_ff > (1 << 20)) return bad("d_ff must be 1..2^20");
  if (max_seq < 2 || max_seq > 65536) return bad("max_seq must be 2..65536");
  if (extra_blocks < 0 || extra_blocks > 4096) return bad("extra_blocks must be 0..4096");
  if (extra_blocks > 0 && (extra_width < 1 || extra_width > (int64_t{1} << 32))) return bad("extra_width out of range");
  if (dtype != DType::kF32 && dtype != DType::kBF16) return bad("dtype must be F32 or BF16");
  return {};
}

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::vector<TensorSpec> tensor_specs(const ModelConfig& c) {
  using I = TensorSpec::Init;
  const int64_t d = c.d_model;
  std::vector<TensorSpec> v;
  v.push_back({"tok_emb", {kVocab, d}, 1, I::kUniform});
  v.push_back({"pos_emb", {c.max_seq, d}, 1, I::kUniform});
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    v.push_back({p + "attn_norm", {d}, 1, I::kOnes});
    for (const char* n : {"wq", "wk", "wv", "wo"}) v.push_back({p + n, {d, d}, d, I::kUniform});
    v.push_back({p + "mlp_norm", {d}, 1, I::kOnes});
    v.push_back({p + "w_up", {c.d_ff, d}, d, I::kUniform});
    v.push_back({p + "w_down", {d, c.d_ff}, c.d_ff, I::kUniform});
  }
  for (int e = 0; e < c.extra_blocks; ++e) {
    const std::string p = "extra." + std::to_string(e) + ".";
    v.push_back({p + "up", {c.extra_width, d}, d, I::kUniform});
    v.push_back({p + "down", {d, c.extra_width}, c.extra_width, I::kSmallUniform});
  }
  v.push_back({"final_norm", {d}, 1, I::kOnes});
  v.push_back({"lm_head", {kVocab, d}, d, I::kUniform});
  return v;
}

std::pair<int64_t, int64_t> extra_slice(int64_t width, const TpPlan& tp) {
  const int64_t n = std::max(1, tp.size);
  return {width * tp.rank / n, width * (tp.rank + 1) / n};
}

std::vector<TensorSpec> tensor_specs(const ModelConfig& c, const TpPlan& tp) {
  if (tp.size <= 1) return tensor_specs(c);
  const auto [lo, hi] = extra_slice(c.extra_width, tp);
  std::vector<TensorSpec> v;
  for (auto s : tensor_specs(c)) {
    const bool extra = s.name.rfind("extra.", 0) == 0;
    if (!extra && tp.rank != 0) continue;
    if (extra && s.name.ends_with(".up")) s.shape[0] = hi - lo;
    if (extra && s.name.ends_with(".down")) s.shape[1] = hi - lo;
    v.push_back(std::move(s));
  }
  return v;
}

uint64_t rank_weight_bytes(const ModelConfig& c, const TpPlan& tp) {
  uint64_t n = 0;
  for (const auto& s : tensor_specs(c, tp)) n += static_cast<uint64_t>(s.numel());
  return n * dtype_size(c.dtype);
}

Status check_tp(const ModelConfig& c, const TpPlan& tp) {
  auto bad = [](const std::string& m) { return make_error(Errc::kInvalidArgument, m); };
  if (tp.size < 1 || tp.size > 8) return bad("--tensor-parallel-size must be 1..8, got " + std::to_string(tp.size));
  if (tp.rank < 0 || tp.rank >= tp.size) return bad("tensor-parallel rank " + std::to_string(tp.rank) + " is not below the size");
  if (tp.size == 1) return {};
  if (c.extra_blocks < 1)
    return bad("--tensor-parallel-size " + std::to_string(tp.size) +
               ": this checkpoint has no extra blocks, the only tensors the ranks split (generate it with --size)");
  if (c.extra_width < tp.size)
    return bad("--tensor-parallel-size " + std::to_string(tp.size) + " exceeds the extra blocks' width " +
               std::to_string(c.extra_width));
  return {};
}

uint64_t total_weight_bytes(const ModelConfig& c) {
  uint64_t n = 0;
  for (const auto& s : tensor_specs(c)) n += static_cast<uint64_t>(s.numel());
  return n * dtype_size(c.dtype);
}

Result<std::map<std::string, const void*>> check_tensors(const ModelConfig& config, const TensorLookup& lookup,
                                                         const TpPlan& tp) {
  FR_TRY(config.validate());
  FR_TRY(check_tp(config, tp));
  std::map<std::string, const void*> ptr;
  for (const auto& spec : tensor_specs(config, tp)) {
    const TensorView* t = lookup(spec.name);
    if (!t) return make_error(Errc::kCorrupt, "tensor '" + spec.name + "' is missing");
    if (t->dtype != config.dtype)
      return make_error(Errc::kCorrupt, "tensor '" + spec.name + "' is " + dtype_name(t->dtype) + ", expected " +
                                            dtype_name(config.dtype));
    if (t->shape != spec.shape) return make_error(Errc::kCorrupt, "tensor '" + spec.name + "' has the wrong shape");
    if (t->nbytes != static_cast<uint64_t>(spec.numel()) * dtype_size(config.dtype))
      return make_error(Errc::kCorrupt, "tensor '" + spec.name + "' has the wrong size");
    if (!t->data || reinterpret_cast<uintptr_t>(t->data) % dtype_size(config.dtype) != 0)
      return make_error(Errc::kCorrupt, "tensor '" + spec.name + "' is not aligned to its element size");
    ptr[spec.name] = t->data;
  }
  return ptr;
}

Result<Model> Model::bind(const ModelConfig& config, const TensorLookup& lookup) {
  return bind(config, lookup, TpPlan{}, nullptr);
}

Result<Model> Model::bind(const ModelConfig& config, const TensorLookup& lookup, const TpPlan& tp, TpReduce reduce) {
  FR_ASSIGN(auto ptr, check_tensors(config, lookup, tp));
  if (tp.size > 1 && tp.rank == 0 && !reduce)
    return make_error(Errc::kInvalidArgument, "tensor-parallel rank 0 needs the other ranks (no reduce)");
  Model m;
  m.m_config = config;
  m.m_tp = tp;
  m.m_reduce = std::move(reduce);
  for (int e = 0; e < config.extra_blocks; ++e) {
    const std::string p = "extra." + std::to_string(e) + ".";
    m.m_extras.push_back({ptr[p + "up"], ptr[p + "down"]});
  }
  if (tp.rank != 0) return m;  // the other ranks hold only their slices of the extra blocks
  m.m_tok_emb = ptr["tok_emb"];
  m.m_pos_emb = ptr["pos_emb"];
  for (int l = 0; l < config.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    m.m_layers.push_back({ptr[p + "attn_norm"], ptr[p + "wq"], ptr[p + "wk"], ptr[p + "wv"], ptr[p + "wo"],
                          ptr[p + "mlp_norm"], ptr[p + "w_up"], ptr[p + "w_down"]});
  }
  m.m_final_norm = ptr["final_norm"];
  m.m_lm_head = ptr["lm_head"];
  return m;
}

void Model::extra_partial(int block, const float* a, float* out) const {
  const int d = m_config.d_model;
  const bool bf16 = m_config.dtype == DType::kBF16;
  const auto [lo, hi] = extra_slice(m_config.extra_width, m_tp);
  const int64_t w = hi - lo;
  std::vector<float> ff(static_cast<size_t>(w));
  const auto& e = m_extras.at(static_cast<size_t>(block));
  matvec(e.up, bf16, a, ff.data(), w, d);
  for (auto& v : ff) v = silu(v);
  matvec(e.down, bf16, ff.data(), out, d, w);
}

Generation Model::generate(const std::vector<int>& prompt, int max_tokens, int top_k, KvCache* cache) const {
  Generation g;
  if (prompt.empty()) return g;
  std::unique_ptr<KvCache::Seq> seq = cache ? cache->begin(prompt) : nullptr;
  ForwardState st(*this, seq.get());
  const int n = static_cast<int>(prompt.size());
  for (int t = seq ? seq->cached() : 0; t < n; ++t) st.step(prompt[t], t, t == n - 1 && max_tokens > 0);
  if (st.error().empty())
    greedy_decode(g, n, max_tokens, top_k, m_config.max_seq, [&] { return st.logits().data(); },
                  [&](int token, int t) {
                    st.step(token, t, true);
                    return st.error().empty();
                  });
  if (!st.error().empty()) g.error = st.error();
  return g;
}

Step greedy_step(const float* lg, int top_k) {
  const int best = static_cast<int>(std::max_element(lg, lg + kVocab) - lg);  // the first maximum
  const double mx = lg[best];
  double sum = 0;
  for (int k = 0; k < kVocab; ++k) sum += std::exp(static_cast<double>(lg[k]) - mx);
  const double lse = mx + std::log(sum);
  Step s;
  s.token = best;
  s.logprob = static_cast<float>(lg[best] - lse);
  if (top_k > 0) {
    std::vector<int> idx(kVocab);
    for (int k = 0; k < kVocab; ++k) idx[k] = k;
    const int k = std::min(top_k, kVocab);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int a, int b) { return lg[a] != lg[b] ? lg[a] > lg[b] : a < b; });
    for (int j = 0; j < k; ++j) s.top.emplace_back(idx[j], static_cast<float>(lg[idx[j]] - lse));
  }
  return s;
}

std::vector<int> tokenize(const std::string& text) {
  std::vector<int> v;
  v.reserve(text.size());
  for (unsigned char ch : text) v.push_back(ch);
  return v;
}

std::string detokenize(const std::vector<int>& tokens) {
  std::string s;
  for (int t : tokens)
    if (t >= 0 && t < 256) s.push_back(static_cast<char>(t));
  return s;
}

std::string token_name(int token) {
  if (token == kEos) return "</s>";
  if (token >= 0x20 && token < 0x7f) return std::string(1, static_cast<char>(token));
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", token & 0xff);
  return buf;
}

}  // namespace fr::te
