// The CUDA forward's kernels (cuda_model.cc launches them through the driver API; the fatbin is embedded).
// Every reduction has a fixed shape and order, so a launch sequence gives bit-identical results each run.
// Weights are F32 or BF16 (template W: float or unsigned short), activations F32.
#include <cstdint>

namespace {

__device__ __forceinline__ float ld(const float* p, long long i) { return p[i]; }
__device__ __forceinline__ float ld(const unsigned short* p, long long i) {
  return __uint_as_float(static_cast<unsigned>(p[i]) << 16);
}

// Block-wide sum of `v` (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  float s = 0;
  for (int w = 0; w < warps; ++w) s += partial[w];
  return s;
}

__device__ float block_max(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  float m = -INFINITY;
  for (int w = 0; w < warps; ++w) m = fmaxf(m, partial[w]);
  return m;
}

template <typename W>
__device__ void embed(const W* tok, const W* pos, int token, int t, float* h, int d) {
  for (int i = threadIdx.x; i < d; i += blockDim.x)
    h[i] = ld(tok, static_cast<long long>(token) * d + i) + ld(pos, static_cast<long long>(t) * d + i);
}

// One block: y = x / rms(x) * gain (gain may be null).
template <typename W>
__device__ void rmsnorm(const float* x, const W* gain, float* y, int n) {
  float ss = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += x[i] * x[i];
  ss = block_sum(ss);
  const float inv = rsqrtf(ss / n + 1e-5f);
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] * inv * (gain ? ld(gain, i) : 1.0f);
}

// y[row] = W[row, :] . x, one warp per row (8 warps per block). act: 0 none, 1 SiLU. accumulate: y += .
template <typename W>
__device__ void gemv_warp(const W* w, const float* x, float* y, long long rows, long long in, int act, int accumulate) {
  const long long row = static_cast<long long>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const W* r = w + row * in;
  float s = 0;
  for (long long i = lane; i < in; i += 32) s += ld(r, i) * x[i];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) {
    if (act == 1) s = s / (1.0f + __expf(-s));
    y[row] = accumulate ? y[row] + s : s;
  }
}

// y[row] = W[row, :] . x, one block per row: for long rows (the wide extra blocks' down projection).
template <typename W>
__device__ void gemv_block(const W* w, const float* x, float* y, long long in, int accumulate) {
  const long long row = blockIdx.x;
  const W* r = w + row * in;
  float s = 0;
  for (long long i = threadIdx.x; i < in; i += blockDim.x) s += ld(r, i) * x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) y[row] = accumulate ? y[row] + s : s;
}

}  // namespace

extern "C" {

__global__ void te_embed_f32(const float* tok, const float* pos, int token, int t, float* h, int d) { embed(tok, pos, token, t, h, d); }
__global__ void te_embed_bf16(const unsigned short* tok, const unsigned short* pos, int token, int t, float* h, int d) { embed(tok, pos, token, t, h, d); }
__global__ void te_rmsnorm_f32(const float* x, const float* g, float* y, int n) { rmsnorm(x, g, y, n); }
__global__ void te_rmsnorm_bf16(const float* x, const unsigned short* g, float* y, int n) { rmsnorm(x, g, y, n); }
__global__ void te_gemv_warp_f32(const float* w, const float* x, float* y, long long rows, long long in, int act, int acc) { gemv_warp(w, x, y, rows, in, act, acc); }
__global__ void te_gemv_warp_bf16(const unsigned short* w, const float* x, float* y, long long rows, long long in, int act, int acc) { gemv_warp(w, x, y, rows, in, act, acc); }
__global__ void te_gemv_block_f32(const float* w, const float* x, float* y, long long in, int acc) { gemv_block(w, x, y, in, acc); }
__global__ void te_gemv_block_bf16(const unsigned short* w, const float* x, float* y, long long in, int acc) { gemv_block(w, x, y, in, acc); }

__global__ void te_silu(float* x, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] / (1.0f + __expf(-x[i]));
}

// One block per head: causal attention of the query at position t over positions 0..t of the cache.
// q, out: [d]; k, v: [max_seq, d]; scores: [n_heads, max_seq] scratch.
__global__ void te_attention(const float* q, const float* k, const float* v, float* out, float* scores, int t, int d,
                             int hd, int max_seq) {
  const int h = blockIdx.x, off = h * hd;
  float* sc = scores + static_cast<long long>(h) * max_seq;
  const float scale = rsqrtf(static_cast<float>(hd));
  float mx = -INFINITY;
  for (int s = threadIdx.x; s <= t; s += blockDim.x) {
    float dot = 0;
    for (int i = 0; i < hd; ++i) dot += q[off + i] * k[static_cast<long long>(s) * d + off + i];
    sc[s] = dot * scale;
    mx = fmaxf(mx, sc[s]);
  }
  mx = block_max(mx);
  float sum = 0;
  for (int s = threadIdx.x; s <= t; s += blockDim.x) sum += (sc[s] = __expf(sc[s] - mx));
  sum = block_sum(sum);
  __syncthreads();
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    float acc = 0;
    for (int s = 0; s <= t; ++s) acc += sc[s] * v[static_cast<long long>(s) * d + off + i];
    out[off + i] = acc / sum;
  }
}

}  // extern "C"
