#include "common/digest.h"

#include <xxhash.h>

#include <cstdio>

namespace fr {

uint64_t hash_chunk(const void* data, size_t n) { return XXH64(data, n, 0); }

uint64_t combine_chunk_hashes(const uint64_t* hashes, size_t n) {
  // Little-endian serialization; on the little-endian hosts we build for this is the array itself.
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "digest assumes a little-endian host");
  return XXH64(hashes, n * sizeof(uint64_t), 0);
}

uint64_t DigestBuilder::finish() const { return combine_chunk_hashes(m_hashes.data(), m_hashes.size()); }

uint64_t digest_of(const void* data, size_t length) {
  DigestBuilder b(length);
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < b.chunks(); ++i) {
    size_t off = i * kDigestChunkBytes;
    size_t n = length - off < kDigestChunkBytes ? length - off : kDigestChunkBytes;
    b.set(i, hash_chunk(p + off, n));
  }
  return b.finish();
}

std::string digest_hex(uint64_t d) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(d));
  return buf;
}

}  // namespace fr
