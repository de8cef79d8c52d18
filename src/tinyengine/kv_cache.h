// The tiny engine's paged KV cache with automatic prefix caching (docs/kv-survival.md), on private memory or
// on a KV arena leased from the weight daemon, where its index survives the engine's kill -9.
//
// Blocks: a block holds the K and V rows of `block_tokens` consecutive positions for every layer, plus the
// block's token ids. A request's positions map to blocks through its block table (KvCache::Seq), as in
// vLLM's paged attention. A full block is entered in the prefix index under its hash: XXH64 over (the
// parent block's hash, the block's token ids), seeded with the identity (the weights that make K/V, the
// model config, the block size), so one hash names one whole prefix of one model. Blocks carry reference
// counts; a block nobody references sits on an LRU free list, still indexed until it is taken for reuse.
//
// Memory (the same layout on private memory and on an arena): a header (magic, version, identity, layout,
// the generation of the lease that last wrote it, a checksum), then one 64-byte index entry per block,
// then the blocks. An entry is published (state = kPublished, a release store) only after its block's
// bytes and its fields (hash, parent, depth, checksum) are written; before a block is written again its
// entry is unpublished (state = 0) and a fence orders that before the writes. So at any instant, a kill
// leaves every published entry describing a complete block; open() checks each one anyway (checksum over
// the fields and the block's bytes, the hash chain, the depth) and drops what it cannot prove.
//
// Thread safety: every KvCache method takes its mutex; a Seq is one request's and used by one thread.
// A Seq writes only blocks it holds unpublished, and reads published blocks, which nobody writes while
// referenced, so the forward runs outside the lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "fastrestart/result.h"
#include "tinyengine/model.h"

namespace fr::te {

inline constexpr int kDefaultBlockTokens = 16;
inline constexpr uint32_t kKvLayoutVersion = 1;

// What makes a block's K/V valid: the tensors that compute K and V (tok_emb, pos_emb, every layer) and the
// config; the block size decides which tokens a hash covers.
struct KvIdentity {
  ModelConfig config;
  uint64_t weights_fingerprint = 0;  // kv_weights_fingerprint()
  int block_tokens = kDefaultBlockTokens;
  uint64_t hash() const;
};
// XXH64 over the bytes of tok_emb, pos_emb and every layers.* tensor (host memory), in tensor_specs order.
// The extra blocks, final norm and head do not change K/V and are left out (they hold a large checkpoint's
// bytes). Errc::kInvalidArgument when a tensor is missing.
Result<uint64_t> kv_weights_fingerprint(const ModelConfig& config, const TensorLookup& lookup);

// The hash of a full block: parent 0 for the first block of a sequence.
uint64_t kv_block_hash(uint64_t identity_hash, uint64_t parent, const int* tokens, int n);

// What open() found in the memory it was given.
struct KvRecovery {
  std::string header = "empty";  // "empty" (no index: fresh or zeroed memory) | "valid" | the mismatch
  uint64_t previous_generation = 0;
  uint64_t recovered = 0;
  std::map<std::string, uint64_t> dropped;  // reason -> blocks: identity, torn, checksum, hash, orphan, duplicate
  uint64_t dropped_total() const;
};

class KvCache {
 public:
  // Lays the cache out over [base, base + bytes) (at least one block must fit). `generation` names the
  // lease (1 for private memory). When the memory holds an index, it is validated against `identity`:
  // a mismatch (magic version, identity, layout, a generation not older than this one, a header checksum)
  // drops and zeroes the whole index; otherwise every published entry is checked and kept or dropped.
  // Nothing is served from the memory before this returns. `base` must be 64-byte aligned and outlive the cache.
  static Result<std::unique_ptr<KvCache>> open(const KvIdentity& identity, void* base, uint64_t bytes,
                                               uint64_t generation);
  // A cache on memory of its own (no survival): `blocks` blocks.
  static Result<std::unique_ptr<KvCache>> open_private(const KvIdentity& identity, uint64_t blocks);
  // The bytes a layout of `blocks` blocks needs.
  static uint64_t bytes_for(const KvIdentity& identity, uint64_t blocks);
  ~KvCache();

  // One request's block table. Positions [0, cached()) were found in the index; the forward computes the
  // rest, calling ensure(t) before writing position t's rows and done(t, token) after.
  class Seq {
   public:
    ~Seq();
    Seq(const Seq&) = delete;
    Seq& operator=(const Seq&) = delete;
    int cached() const { return m_cached; }
    // Makes position t writable (t == the next position); false when no block is free (the request then
    // runs without the cache from t on: the caller keeps private rows).
    bool ensure(int t);
    // Row `kind` (0: K, 1: V) of layer `l` at position t (d_model floats).
    float* row(int l, int kind, int t) const;
    // Position t is computed (its token `token`): a block that becomes full is published.
    void done(int t, int token);

   private:
    friend class KvCache;
    explicit Seq(KvCache& c) : m_c(c) {}
    KvCache& m_c;
    std::vector<int> m_blocks;   // block ids, in position order
    std::vector<int> m_tokens;   // tokens of positions computed or matched
    std::vector<uint64_t> m_hashes;  // hashes of the full blocks so far
    int m_cached = 0;
    bool m_full = false;  // ensure() found no free block: no more blocks for this request
  };
  // Starts a request over `prompt`: the longest indexed prefix of full blocks, leaving at least the last
  // prompt token to compute (its logits are needed). Counts queries and hits.
  std::unique_ptr<Seq> begin(const std::vector<int>& prompt);

  // The memory was unmapped and leased again as `generation` (a snapshot's resume): another holder may
  // have used it in between, so the index is rebuilt from the memory as open() does. No Seq may be live.
  void resync(uint64_t generation);

  const KvRecovery& recovery() const { return m_recovery; }
  int block_tokens() const { return m_block_tokens; }
  uint64_t blocks() const { return m_num_blocks; }
  bool on_arena() const { return m_arena; }
  nlohmann::json stats() const;
  // "blocks=... recovered=... dropped=... (reasons)": the startup log line's fields.
  std::string summary() const;

  // The memory layout's records (kv_cache.cc; docs/kv-survival.md, "Layout").
  struct Header;
  struct Entry;

 private:
  KvCache() = default;
  Entry* entry(int b) const;
  std::byte* block(int b) const;
  int* block_tokens_of(int b) const;
  uint64_t checksum_of(int b) const;
  void layout(const KvIdentity& identity, void* base, uint64_t bytes);
  void init_header();
  void recover();
  void unpublish_locked(int b);
  int allocate_locked();
  void release_locked(int b);
  void publish(Seq& s, int block_index);

  mutable std::mutex m_mutex;
  KvIdentity m_identity;
  uint64_t m_identity_hash = 0;
  std::byte* m_base = nullptr;
  uint64_t m_bytes = 0;
  uint64_t m_generation = 1;
  bool m_arena = false;
  std::vector<uint64_t> m_own;  // open_private's memory (8-byte elements: aligned for the header's atomics)
  int m_block_tokens = kDefaultBlockTokens;
  uint64_t m_num_blocks = 0, m_block_bytes = 0, m_table_offset = 0, m_blocks_offset = 0;
  size_t m_row_floats = 0;  // d_model
  std::vector<int> m_refs;
  std::vector<uint64_t> m_hash;  // 0: not indexed
  std::unordered_map<uint64_t, int> m_index;
  std::list<int> m_free;  // front: the next to take (unindexed first, then least recently used)
  std::vector<std::list<int>::iterator> m_free_pos;
  std::vector<bool> m_is_free;
  uint64_t m_clock = 0;  // LRU stamps
  KvRecovery m_recovery;
  uint64_t m_query_tokens = 0, m_hit_tokens = 0, m_requests = 0, m_evicted = 0, m_published = 0, m_no_block = 0;
};

}  // namespace fr::te
