// Device code embedded in fr_cuda as a fatbin (sm_90 SASS + compute_90 PTX), loaded with cuModuleLoadData.
// extern "C" keeps the names the host looks up with cuModuleGetFunction stable.
//
// fr_chunk_xxh64: XXH64 (seed 0) of each 64 KiB chunk of [base, base+length), bit-identical to libxxhash
// (common/digest.h). XXH64 keeps four independent 64-bit accumulators, lane j taking bytes [8j, 8j+8) of
// every 32-byte stripe; we give each accumulator its own thread, so four neighbouring threads read one
// contiguous 32-byte sector per step, then lane 0 gathers the four with warp shuffles and finishes the
// hash (merge, length, tail bytes, avalanche) exactly as the reference does.
// REQUIRES: base 8-byte aligned (chunks start at multiples of 64 KiB, so every 8-byte load is aligned);
// blockDim.x a multiple of 32 (the shuffles use the full warp mask).
#include <cstdint>

namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ULL;
constexpr uint64_t kChunk = 64 * 1024;

__device__ __forceinline__ uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

__device__ __forceinline__ uint64_t xxh_round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  acc = rotl(acc, 31);
  return acc * kP1;
}

__device__ __forceinline__ uint64_t merge_round(uint64_t acc, uint64_t val) {
  acc ^= xxh_round(0, val);
  return acc * kP1 + kP4;
}

__device__ __forceinline__ uint64_t read64(const unsigned char* p) {
  return *reinterpret_cast<const uint64_t*>(p);
}

__device__ __forceinline__ uint32_t read32(const unsigned char* p) {
  // The tail after the 8-byte steps starts at an 8-byte boundary of the chunk, so this is 4-aligned.
  return *reinterpret_cast<const uint32_t*>(p);
}

}  // namespace

extern "C" __global__ void fr_chunk_xxh64(const unsigned char* __restrict__ base, uint64_t length,
                                          uint64_t* __restrict__ out) {
  const uint64_t gid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t chunk = gid >> 2;
  const int lane = static_cast<int>(gid & 3);
  const uint64_t chunks = (length + kChunk - 1) / kChunk;
  const bool active = chunk < chunks;

  uint64_t n = 0;
  const unsigned char* p = base;
  if (active) {
    p = base + chunk * kChunk;
    n = length - chunk * kChunk < kChunk ? length - chunk * kChunk : kChunk;
  }
  const uint64_t stripes = n / 32;

  const uint64_t init[4] = {kP1 + kP2, kP2, 0, 0 - kP1};
  uint64_t acc = init[lane];
  const unsigned char* q = p + 8 * lane;
#pragma unroll 8
  for (uint64_t s = 0; s < stripes; ++s) acc = xxh_round(acc, read64(q + 32 * s));

  // Every thread of the warp takes part in the shuffles, active or not.
  const int leader = static_cast<int>(threadIdx.x & ~3u);
  const uint64_t v1 = __shfl_sync(0xffffffffu, acc, leader + 0);
  const uint64_t v2 = __shfl_sync(0xffffffffu, acc, leader + 1);
  const uint64_t v3 = __shfl_sync(0xffffffffu, acc, leader + 2);
  const uint64_t v4 = __shfl_sync(0xffffffffu, acc, leader + 3);
  if (!active || lane != 0) return;

  uint64_t h;
  if (n >= 32) {
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = merge_round(h, v1);
    h = merge_round(h, v2);
    h = merge_round(h, v3);
    h = merge_round(h, v4);
  } else {
    h = kP5;  // seed 0
  }
  h += n;

  const unsigned char* t = p + stripes * 32;
  uint64_t left = n - stripes * 32;
  while (left >= 8) {
    h ^= xxh_round(0, read64(t));
    h = rotl(h, 27) * kP1 + kP4;
    t += 8;
    left -= 8;
  }
  if (left >= 4) {
    h ^= static_cast<uint64_t>(read32(t)) * kP1;
    h = rotl(h, 23) * kP2 + kP3;
    t += 4;
    left -= 4;
  }
  while (left > 0) {
    h ^= static_cast<uint64_t>(*t) * kP5;
    h = rotl(h, 11) * kP1;
    ++t;
    --left;
  }
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  out[chunk] = h;
}

// Writes one byte. Used by tests to prove a read-only mapping refuses writes (the launch then fails with
// an illegal-address error in the writer's context only).
extern "C" __global__ void fr_write_byte(unsigned char* p, unsigned char value) { *p = value; }
