// The content digest of a weight pool (docs/protocol.md, "Content digest").
//
// The pool's bytes [0, length) are cut into fixed chunks of kDigestChunkBytes (the last one may be short).
// Each chunk is hashed with XXH64 (seed 0); the digest is XXH64 (seed 0) of the chunk hashes written in
// order as little-endian uint64. Chunks are independent, so reader threads hash what they read in any
// order and the GPU recomputes the same value with one thread per chunk (src/cuda/digest_kernel.cu).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fr {

inline constexpr size_t kDigestChunkBytes = 64 * 1024;

inline size_t digest_chunk_count(size_t length) {
  return (length + kDigestChunkBytes - 1) / kDigestChunkBytes;
}

uint64_t hash_chunk(const void* data, size_t n);

// Collects chunk hashes (set in any order, from any thread as long as indexes differ) and combines them.
class DigestBuilder {
 public:
  explicit DigestBuilder(size_t length) : m_hashes(digest_chunk_count(length)) {}
  void set(size_t chunk, uint64_t h) { m_hashes[chunk] = h; }
  size_t chunks() const { return m_hashes.size(); }
  uint64_t finish() const;
  std::vector<uint64_t>& hashes() { return m_hashes; }

 private:
  std::vector<uint64_t> m_hashes;
};

// Combines chunk hashes in order (the step shared by CPU and GPU paths).
uint64_t combine_chunk_hashes(const uint64_t* hashes, size_t n);
// Digest of a contiguous host buffer (single-threaded; used by verify and tests).
uint64_t digest_of(const void* data, size_t length);

std::string digest_hex(uint64_t d);

}  // namespace fr
