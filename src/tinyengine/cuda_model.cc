#include "tinyengine/cuda_model.h"

#include <cstdio>
#include <mutex>

#include "cuda/device.h"
#include "cuda/driver.h"
#include "cuda/handles.h"
#include "tinyengine/checkpoint.h"
#include "tinyengine/forward_fatbin.h"

namespace fr::te {
namespace {

using cuda::check;

constexpr unsigned kThreads = 256;     // a multiple of 32; gemv_warp: 8 rows per block
constexpr int64_t kWarpRowMax = 4096;  // longer rows use one block per row

struct Functions {
  CUfunction embed = nullptr, rmsnorm = nullptr, gemv_warp = nullptr, gemv_block = nullptr;
  CUfunction silu = nullptr, attention = nullptr;
};

class CudaModelImpl final : public CudaModel {
 public:
  static Result<std::shared_ptr<CudaModel>> create(const ModelConfig& c, std::map<std::string, const void*> ptr,
                                                   int ordinal) {
    FR_ASSIGN(auto dev, cuda::Device::open_ordinal(ordinal));
    std::shared_ptr<CudaModelImpl> m(new CudaModelImpl(c, dev));
    const auto& d = dev->driver();
    cuda::ScopedContext scope(dev->context());
    FR_TRY(scope.status());
    CUmodule mod = nullptr;
    FR_TRY(check(d.cuModuleLoadData(&mod, fr_te_forward_fatbin), "cuModuleLoadData(tinyengine forward)"));
    m->m_module = cuda::Module(dev->context(), mod);
    const bool bf16 = c.dtype == DType::kBF16;
    auto get = [&](CUfunction* f, std::string name) -> Status {
      return check(d.cuModuleGetFunction(f, mod, name.c_str()), "cuModuleGetFunction");
    };
    const std::string sfx = bf16 ? "_bf16" : "_f32";
    FR_TRY(get(&m->m_fn.embed, "te_embed" + sfx));
    FR_TRY(get(&m->m_fn.rmsnorm, "te_rmsnorm" + sfx));
    FR_TRY(get(&m->m_fn.gemv_warp, "te_gemv_warp" + sfx));
    FR_TRY(get(&m->m_fn.gemv_block, "te_gemv_block" + sfx));
    FR_TRY(get(&m->m_fn.silu, "te_silu"));
    FR_TRY(get(&m->m_fn.attention, "te_attention"));
    FR_ASSIGN(m->m_stream, cuda::create_stream(dev->context()));
    // Scratch for one request at a time (generate() holds m_mu): KV cache, activations, scores, logits.
    const int64_t dm = c.d_model, seq = c.max_seq;
    const int64_t ff = std::max<int64_t>(c.d_ff, c.extra_blocks > 0 ? c.extra_width : 0);
    const int64_t floats = 2 * c.n_layers * seq * dm + 6 * dm + ff + c.n_heads * seq + kVocab;
    FR_ASSIGN(m->m_scratch, cuda::alloc_device(dev->context(), static_cast<size_t>(floats) * 4));
    CUdeviceptr p = m->m_scratch.get();
    auto take = [&p](int64_t n) {
      CUdeviceptr r = p;
      p += static_cast<CUdeviceptr>(n) * 4;
      return r;
    };
    m->m_k = take(c.n_layers * seq * dm);
    m->m_v = take(c.n_layers * seq * dm);
    m->m_h = take(dm), m->m_a = take(dm), m->m_q = take(dm), m->m_att = take(dm);
    take(2 * dm);
    m->m_ff = take(ff);
    m->m_scores = take(c.n_heads * seq);
    m->m_logits = take(kVocab);
    auto dp = [&](const std::string& n) { return reinterpret_cast<CUdeviceptr>(ptr.at(n)); };
    m->m_tok_emb = dp("tok_emb");
    m->m_pos_emb = dp("pos_emb");
    for (int l = 0; l < c.n_layers; ++l) {
      const std::string pfx = "layers." + std::to_string(l) + ".";
      m->m_layers.push_back({dp(pfx + "attn_norm"), dp(pfx + "wq"), dp(pfx + "wk"), dp(pfx + "wv"), dp(pfx + "wo"),
                             dp(pfx + "mlp_norm"), dp(pfx + "w_up"), dp(pfx + "w_down")});
    }
    for (int e = 0; e < c.extra_blocks; ++e) {
      const std::string pfx = "extra." + std::to_string(e) + ".";
      m->m_extras.push_back({dp(pfx + "up"), dp(pfx + "down")});
    }
    m->m_final_norm = dp("final_norm");
    m->m_lm_head = dp("lm_head");
    return std::shared_ptr<CudaModel>(m);
  }

  std::string device_name() const override { return "cuda:" + std::to_string(m_dev->ordinal()) + " (" + m_dev->name() + ")"; }

  Generation generate(const std::vector<int>& prompt, int max_tokens, int top_k) const override {
    std::lock_guard lk(m_mu);
    Generation g;
    auto r = run(prompt, max_tokens, top_k, g);
    if (!r.ok()) g.error = r.error().to_string();
    return g;
  }

 private:
  struct Layer {
    CUdeviceptr attn_norm, wq, wk, wv, wo, mlp_norm, w_up, w_down;
  };
  struct Extra {
    CUdeviceptr up, down;
  };

  CudaModelImpl(const ModelConfig& c, std::shared_ptr<cuda::Device> dev) : m_c(c), m_dev(std::move(dev)) {}

  template <typename... A>
  Status launch(CUfunction f, unsigned grid, unsigned block, A... a) const {
    void* args[] = {static_cast<void*>(&a)...};
    return check(m_dev->driver().cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, m_stream.get(), args, nullptr),
                 "cuLaunchKernel");
  }

  // y (+)= W x; W is [rows, in]; act 1 applies SiLU (not with accumulate).
  Status gemv(CUdeviceptr w, CUdeviceptr x, CUdeviceptr y, int64_t rows, int64_t in, int act, int acc) const {
    long long r = rows, n = in;
    if (in <= kWarpRowMax || act != 0) {
      const auto grid = static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32));
      return launch(m_fn.gemv_warp, grid, kThreads, w, x, y, r, n, act, acc);
    }
    return launch(m_fn.gemv_block, static_cast<unsigned>(rows), kThreads, w, x, y, n, acc);
  }

  Status rmsnorm(CUdeviceptr x, CUdeviceptr gain, CUdeviceptr y) const {
    return launch(m_fn.rmsnorm, 1, kThreads, x, gain, y, m_c.d_model);
  }

  // h += down(silu(up(rmsnorm(h) * gain)))
  Status mlp(CUdeviceptr gain, CUdeviceptr up, CUdeviceptr down, int64_t width) const {
    FR_TRY(rmsnorm(m_h, gain, m_a));
    FR_TRY(gemv(up, m_a, m_ff, width, m_c.d_model, 1, 0));
    return gemv(down, m_ff, m_h, m_c.d_model, width, 0, 1);
  }

  Status step(int token, int t, bool want_logits, std::vector<float>& logits) const {
    const int d = m_c.d_model, hd = d / m_c.n_heads;
    FR_TRY(launch(m_fn.embed, 1, kThreads, m_tok_emb, m_pos_emb, token, t, m_h, d));
    const auto layer_cache = static_cast<CUdeviceptr>(m_c.max_seq) * static_cast<CUdeviceptr>(d) * 4;
    for (size_t l = 0; l < m_layers.size(); ++l) {
      const auto& L = m_layers[l];
      const CUdeviceptr kc = m_k + l * layer_cache, vc = m_v + l * layer_cache;
      const CUdeviceptr row = static_cast<CUdeviceptr>(t) * static_cast<CUdeviceptr>(d) * 4;
      FR_TRY(rmsnorm(m_h, L.attn_norm, m_a));
      FR_TRY(gemv(L.wq, m_a, m_q, d, d, 0, 0));
      FR_TRY(gemv(L.wk, m_a, kc + row, d, d, 0, 0));
      FR_TRY(gemv(L.wv, m_a, vc + row, d, d, 0, 0));
      FR_TRY(launch(m_fn.attention, static_cast<unsigned>(m_c.n_heads), 128u, m_q, kc, vc, m_att, m_scores, t, d, hd,
                    m_c.max_seq));
      FR_TRY(gemv(L.wo, m_att, m_h, d, d, 0, 1));
      FR_TRY(mlp(L.mlp_norm, L.w_up, L.w_down, m_c.d_ff));
    }
    if (!want_logits) return {};
    for (const auto& e : m_extras) FR_TRY(mlp(0, e.up, e.down, m_c.extra_width));
    FR_TRY(rmsnorm(m_h, m_final_norm, m_a));
    FR_TRY(gemv(m_lm_head, m_a, m_logits, kVocab, d, 0, 0));
    const auto& drv = m_dev->driver();
    FR_TRY(check(drv.cuStreamSynchronize(m_stream.get()), "forward"));
    logits.resize(kVocab);
    return check(drv.cuMemcpyDtoH(logits.data(), m_logits, kVocab * sizeof(float)), "cuMemcpyDtoH(logits)");
  }

  Status run(const std::vector<int>& prompt, int max_tokens, int top_k, Generation& g) const {
    if (prompt.empty()) return {};
    cuda::ScopedContext scope(m_dev->context());
    FR_TRY(scope.status());
    std::vector<float> logits;
    const int n = static_cast<int>(prompt.size());
    for (int t = 0; t < n; ++t) FR_TRY(step(prompt[t], t, t == n - 1 && max_tokens > 0, logits));
    Status failed;
    greedy_decode(g, n, max_tokens, top_k, m_c.max_seq, [&] { return logits.data(); }, [&](int token, int t) {
      failed = step(token, t, true, logits);
      return failed.ok();
    });
    return failed;
  }

  Status capture_weight_graph() override {
    std::lock_guard lk(m_mu);
    const auto& d = m_dev->driver();
    if (!d.cuStreamBeginCapture || !d.cuGraphInstantiateWithFlags || !d.cuGraphLaunch)
      return make_error(Errc::kUnsupported, "this CUDA driver has no stream capture");
    cuda::ScopedContext scope(m_dev->context());
    FR_TRY(scope.status());
    FR_ASSIGN(m_graph_io, cuda::alloc_device(m_dev->context(), static_cast<size_t>(m_c.d_model + kVocab) * 4));
    const std::vector<float> ones(static_cast<size_t>(m_c.d_model), 1.0f);
    FR_TRY(check(d.cuMemcpyHtoD(m_graph_io.get(), ones.data(), ones.size() * 4), "cuMemcpyHtoD(graph input)"));
    const CUdeviceptr in = m_graph_io.get(), out = in + static_cast<CUdeviceptr>(m_c.d_model) * 4;
    FR_TRY(check(d.cuStreamBeginCapture(m_stream.get(), CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture"));
    Status launched = gemv(m_lm_head, in, out, kVocab, m_c.d_model, 0, 0);
    CUgraph graph = nullptr;
    FR_TRY(check(d.cuStreamEndCapture(m_stream.get(), &graph), "cuStreamEndCapture"));
    FR_TRY(launched);
    CUgraphExec exec = nullptr;
    const CUresult r = d.cuGraphInstantiateWithFlags(&exec, graph, 0);
    d.cuGraphDestroy(graph);
    FR_TRY(check(r, "cuGraphInstantiateWithFlags"));
    m_graph = exec;
    return {};
  }

  Result<std::string> replay_weight_graph() const override {
    std::lock_guard lk(m_mu);
    if (!m_graph) return make_error(Errc::kInvalidArgument, "no graph captured");
    const auto& d = m_dev->driver();
    cuda::ScopedContext scope(m_dev->context());
    FR_TRY(scope.status());
    FR_TRY(check(d.cuGraphLaunch(m_graph, m_stream.get()), "cuGraphLaunch"));
    FR_TRY(check(d.cuStreamSynchronize(m_stream.get()), "graph replay"));
    std::vector<uint32_t> out(kVocab);
    FR_TRY(check(d.cuMemcpyDtoH(out.data(), m_graph_io.get() + static_cast<CUdeviceptr>(m_c.d_model) * 4, out.size() * 4),
                 "cuMemcpyDtoH(graph output)"));
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the output's bits
    for (uint32_t v : out) h = (h ^ v) * 1099511628211ull;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    return std::string(hex);
  }

  ModelConfig m_c;
  std::shared_ptr<cuda::Device> m_dev;
  cuda::Module m_module;
  cuda::Stream m_stream;
  cuda::DeviceMemory m_scratch;
  Functions m_fn;
  mutable std::mutex m_mu;
  CUdeviceptr m_k = 0, m_v = 0, m_h = 0, m_a = 0, m_q = 0, m_att = 0, m_ff = 0, m_scores = 0, m_logits = 0;
  CUdeviceptr m_tok_emb = 0, m_pos_emb = 0, m_final_norm = 0, m_lm_head = 0;
  std::vector<Layer> m_layers;
  std::vector<Extra> m_extras;
  cuda::DeviceMemory m_graph_io;  // the graph check's input (d_model ones) and output (kVocab logits)
  CUgraphExec m_graph = nullptr;  // never destroyed: it lives as long as the engine
};

// Device memory for uploaded tensors; the device outlives the memory (members die in reverse order).
struct DeviceBuffers {
  std::shared_ptr<cuda::Device> dev;
  cuda::DeviceMemory mem;
};

}  // namespace

Result<std::shared_ptr<CudaModel>> bind_cuda_model(const ModelConfig& config, const TensorLookup& lookup, int ordinal) {
  FR_ASSIGN(auto ptr, check_tensors(config, lookup));
  return CudaModelImpl::create(config, std::move(ptr), ordinal);
}

Result<TensorSet> upload_to_cuda(const TensorSet& host, int ordinal) {
  auto bufs = std::make_shared<DeviceBuffers>();
  FR_ASSIGN(bufs->dev, cuda::Device::open_ordinal(ordinal));
  uint64_t total = 0;
  for (const auto& [name, t] : host.tensors) total += (t.nbytes + 255) / 256 * 256;
  FR_ASSIGN(bufs->mem, cuda::alloc_device(bufs->dev->context(), std::max<uint64_t>(total, 256)));
  const auto& d = bufs->dev->driver();
  cuda::ScopedContext scope(bufs->dev->context());
  FR_TRY(scope.status());
  TensorSet out;
  CUdeviceptr p = bufs->mem.get();
  for (const auto& [name, t] : host.tensors) {
    FR_TRY(check(d.cuMemcpyHtoD(p, t.data, t.nbytes), "cuMemcpyHtoD(weights)"));
    out.tensors[name] = TensorView{t.dtype, t.shape, reinterpret_cast<const void*>(p), t.nbytes};
    p += (t.nbytes + 255) / 256 * 256;
  }
  out.owner = bufs;
  return out;
}

}  // namespace fr::te
