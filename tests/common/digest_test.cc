#include "common/digest.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <random>
#include <vector>

namespace fr {
namespace {

TEST(Digest, MatchesTheDocumentedConstruction) {
  std::vector<unsigned char> b(3 * kDigestChunkBytes + 123);
  std::mt19937 rng(5);
  for (auto& x : b) x = static_cast<unsigned char>(rng());
  std::vector<uint64_t> h;
  for (size_t off = 0; off < b.size(); off += kDigestChunkBytes)
    h.push_back(XXH64(b.data() + off, std::min(kDigestChunkBytes, b.size() - off), 0));
  EXPECT_EQ(h.size(), 4u);
  EXPECT_EQ(digest_of(b.data(), b.size()), XXH64(h.data(), h.size() * 8, 0));
}

TEST(Digest, EveryByteMatters) {
  std::vector<unsigned char> b(2 * kDigestChunkBytes + 7, 0);
  const uint64_t base = digest_of(b.data(), b.size());
  for (size_t pos : {size_t{0}, size_t{1024}, kDigestChunkBytes + 5, b.size() - 1}) {
    b[pos] ^= 1;
    EXPECT_NE(digest_of(b.data(), b.size()), base) << pos;
    b[pos] ^= 1;
  }
}

TEST(Digest, ChunksCanBeSetInAnyOrder) {
  std::vector<unsigned char> b(5 * kDigestChunkBytes, 9);
  DigestBuilder d(b.size());
  for (size_t i = d.chunks(); i-- > 0;) d.set(i, hash_chunk(b.data() + i * kDigestChunkBytes, kDigestChunkBytes));
  EXPECT_EQ(d.finish(), digest_of(b.data(), b.size()));
  EXPECT_EQ(digest_hex(0xabcULL), "0000000000000abc");
}

}  // namespace
}  // namespace fr
