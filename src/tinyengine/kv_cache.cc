#include "tinyengine/kv_cache.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace fr::te {
namespace {

constexpr uint64_t kKvMagic = 0x314e52414b56524bull;   // "KRVKARN1" little-endian: the KV arena's header
constexpr uint64_t kPublished = 0x4853494c42555031ull;  // an entry's state once its block is complete
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kEntryBytes = 64;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Bytes of a block: its token ids (padded to 64), then K and V rows of every layer.
uint64_t block_bytes_of(const KvIdentity& id) {
  const auto b = static_cast<uint64_t>(id.block_tokens);
  return align_up(b * sizeof(int32_t), 64) +
         align_up(static_cast<uint64_t>(id.config.n_layers) * 2 * b * static_cast<uint64_t>(id.config.d_model) * 4, 64);
}

uint64_t blocks_offset_for(uint64_t blocks) { return align_up(kHeaderBytes + blocks * kEntryBytes, 4096); }

}  // namespace

// The header at the start of the memory. Plain fields; `magic` is written last (release) on a fresh
// layout, and `checksum` covers [version, checksum).
struct KvCache::Header {
  std::atomic<uint64_t> magic;
  uint32_t version;
  uint32_t header_bytes;
  uint64_t identity_hash;
  uint64_t weights_fingerprint;
  uint64_t config_hash;  // XXH64 of the model config's JSON
  uint32_t block_tokens, n_layers, d_model, max_seq;
  uint64_t num_blocks, block_bytes, table_offset, blocks_offset, region_bytes;
  uint64_t writer_generation;  // the lease generation of the holder that last laid out or recovered it
  uint64_t checksum;
};
static_assert(sizeof(KvCache::Header) <= kHeaderBytes);

// One index entry per block. `state` is kPublished only while the block's bytes and these fields are
// complete; `checksum` covers hash, parent, depth, generation and the block's bytes; `last_used` is an
// LRU hint outside the checksum (a wrong value only changes which block is evicted first).
struct KvCache::Entry {
  std::atomic<uint64_t> state;
  uint64_t hash, parent, depth, generation, checksum;
  std::atomic<uint64_t> last_used;
  uint64_t reserved;
};
static_assert(sizeof(KvCache::Entry) == kEntryBytes);

uint64_t KvIdentity::hash() const {
  const std::string c = config.to_json();
  XXH64_state_t st;
  XXH64_state_t* s = &st;
  XXH64_reset(s, kKvLayoutVersion);
  XXH64_update(s, c.data(), c.size());
  XXH64_update(s, &weights_fingerprint, sizeof weights_fingerprint);
  const auto b = static_cast<uint64_t>(block_tokens);
  XXH64_update(s, &b, sizeof b);
  const uint64_t h = XXH64_digest(s);
  return h;
}

Result<uint64_t> kv_weights_fingerprint(const ModelConfig& config, const TensorLookup& lookup) {
  XXH64_state_t st;
  XXH64_state_t* s = &st;
  XXH64_reset(s, 0);
  for (const auto& spec : tensor_specs(config)) {
    if (spec.name != "tok_emb" && spec.name != "pos_emb" && spec.name.rfind("layers.", 0) != 0) continue;
    const TensorView* t = lookup(spec.name);
    if (!t || !t->data) {
      return make_error(Errc::kInvalidArgument, "kv cache: tensor '" + spec.name + "' is not in host memory");
    }
    XXH64_update(s, spec.name.data(), spec.name.size());
    XXH64_update(s, t->data, t->nbytes);
  }
  const uint64_t h = XXH64_digest(s);
  return h;
}

uint64_t kv_block_hash(uint64_t identity_hash, uint64_t parent, const int* tokens, int n) {
  XXH64_state_t st;
  XXH64_state_t* s = &st;
  XXH64_reset(s, identity_hash);
  XXH64_update(s, &parent, sizeof parent);
  XXH64_update(s, tokens, static_cast<size_t>(n) * sizeof(int));
  uint64_t h = XXH64_digest(s);
  return h == 0 ? 1 : h;  // 0 means "not indexed"
}

uint64_t KvRecovery::dropped_total() const {
  uint64_t n = 0;
  for (const auto& [_, v] : dropped) n += v;
  return n;
}

uint64_t KvCache::bytes_for(const KvIdentity& identity, uint64_t blocks) {
  return blocks_offset_for(blocks) + blocks * block_bytes_of(identity);
}

KvCache::~KvCache() = default;

KvCache::Entry* KvCache::entry(int b) const {
  return reinterpret_cast<Entry*>(m_base + m_table_offset + static_cast<uint64_t>(b) * kEntryBytes);
}
std::byte* KvCache::block(int b) const { return m_base + m_blocks_offset + static_cast<uint64_t>(b) * m_block_bytes; }
int* KvCache::block_tokens_of(int b) const { return reinterpret_cast<int*>(block(b)); }

uint64_t KvCache::checksum_of(int b) const {
  const Entry* e = entry(b);
  XXH64_state_t st;
  XXH64_state_t* s = &st;
  XXH64_reset(s, m_identity_hash);
  const uint64_t f[4] = {e->hash, e->parent, e->depth, e->generation};
  XXH64_update(s, f, sizeof f);
  XXH64_update(s, block(b), m_block_bytes);
  const uint64_t h = XXH64_digest(s);
  return h;
}

void KvCache::layout(const KvIdentity& identity, void* base, uint64_t bytes) {
  m_identity = identity;
  m_identity_hash = identity.hash();
  m_block_tokens = identity.block_tokens;
  m_row_floats = static_cast<size_t>(identity.config.d_model);
  m_base = static_cast<std::byte*>(base);
  m_bytes = bytes;
  m_block_bytes = block_bytes_of(identity);
  uint64_t n = bytes > 2 * kHeaderBytes ? (bytes - 2 * kHeaderBytes) / (kEntryBytes + m_block_bytes) : 0;
  while (n > 0 && bytes_for(identity, n) > bytes) --n;
  while (bytes_for(identity, n + 1) <= bytes) ++n;  // the estimate above leaves the table's alignment as slack
  m_num_blocks = n;
  m_table_offset = kHeaderBytes;
  m_blocks_offset = blocks_offset_for(n);
  m_refs.assign(n, 0);
  m_hash.assign(n, 0);
  m_free_pos.assign(n, {});
  m_is_free.assign(n, false);
}

Result<std::unique_ptr<KvCache>> KvCache::open_private(const KvIdentity& identity, uint64_t blocks) {
  if (blocks == 0) return make_error(Errc::kInvalidArgument, "kv cache: at least one block is needed");
  const uint64_t bytes = bytes_for(identity, blocks);
  std::vector<uint64_t> mem(bytes / sizeof(uint64_t) + 1, 0);
  auto c = open(identity, mem.data(), bytes, 1);
  if (c) (*c)->m_own = std::move(mem);  // the buffer moves, its address does not
  if (c) (*c)->m_arena = false;
  return c;
}

Result<std::unique_ptr<KvCache>> KvCache::open(const KvIdentity& identity, void* base, uint64_t bytes,
                                               uint64_t generation) {
  if (identity.block_tokens < 1 || identity.block_tokens > 4096)
    return make_error(Errc::kInvalidArgument, "kv cache: --block-size must be 1..4096");
  if (reinterpret_cast<uintptr_t>(base) % 8 != 0)
    return make_error(Errc::kInvalidArgument, "kv cache: the memory is not 8-byte aligned");
  std::unique_ptr<KvCache> c(new KvCache);
  c->layout(identity, base, bytes);
  c->m_generation = generation;
  c->m_arena = true;
  if (c->m_num_blocks == 0)
    return make_error(Errc::kInvalidArgument, "kv cache: " + std::to_string(bytes) + " bytes hold no block of " +
                                                  std::to_string(c->m_block_bytes) + " bytes (after the header)");
  c->recover();
  return c;
}

void KvCache::init_header() {
  auto* h = reinterpret_cast<Header*>(m_base);
  h->magic.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the magic is gone before anything else changes
  std::memset(m_base + m_table_offset, 0, m_num_blocks * kEntryBytes);
  const std::string cfg = m_identity.config.to_json();
  h->version = kKvLayoutVersion;
  h->header_bytes = static_cast<uint32_t>(kHeaderBytes);
  h->identity_hash = m_identity_hash;
  h->weights_fingerprint = m_identity.weights_fingerprint;
  h->config_hash = XXH64(cfg.data(), cfg.size(), 0);
  h->block_tokens = static_cast<uint32_t>(m_block_tokens);
  h->n_layers = static_cast<uint32_t>(m_identity.config.n_layers);
  h->d_model = static_cast<uint32_t>(m_identity.config.d_model);
  h->max_seq = static_cast<uint32_t>(m_identity.config.max_seq);
  h->num_blocks = m_num_blocks;
  h->block_bytes = m_block_bytes;
  h->table_offset = m_table_offset;
  h->blocks_offset = m_blocks_offset;
  h->region_bytes = m_bytes;
  h->writer_generation = m_generation;
  h->checksum = XXH64(&h->version, offsetof(Header, checksum) - offsetof(Header, version), m_identity_hash);
  h->magic.store(kKvMagic, std::memory_order_release);  // complete: a kill before this leaves no magic
}

void KvCache::unpublish_locked(int b) {
  entry(b)->state.store(0, std::memory_order_relaxed);
  // The entry is withdrawn before any later write to its block or fields (a kill in between leaves an
  // unpublished entry over a half-written block, never a published one).
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void KvCache::recover() {
  auto* h = reinterpret_cast<Header*>(m_base);
  const uint64_t magic = h->magic.load(std::memory_order_acquire);
  std::string mismatch;
  if (magic == 0) {
    m_recovery.header = "empty";
  } else if (magic != kKvMagic) {
    mismatch = "foreign";  // not our layout at all (another user of the memory): nothing to count
  } else {
    m_recovery.previous_generation = h->writer_generation;
    const std::string cfg = m_identity.config.to_json();
    const uint64_t sum = XXH64(&h->version, offsetof(Header, checksum) - offsetof(Header, version), h->identity_hash);
    if (h->version != kKvLayoutVersion) mismatch = "version";
    else if (h->checksum != sum) mismatch = "header_checksum";
    else if (h->weights_fingerprint != m_identity.weights_fingerprint || h->config_hash != XXH64(cfg.data(), cfg.size(), 0) ||
             h->identity_hash != m_identity_hash)
      mismatch = "identity";
    else if (h->block_tokens != static_cast<uint32_t>(m_block_tokens) || h->num_blocks != m_num_blocks ||
             h->block_bytes != m_block_bytes || h->table_offset != m_table_offset ||
             h->blocks_offset != m_blocks_offset || h->region_bytes != m_bytes || h->header_bytes != kHeaderBytes)
      mismatch = "layout";
    else if (h->writer_generation >= m_generation)
      mismatch = "generation";  // written by a lease not older than this one: not a previous holder's
    else
      m_recovery.header = "valid";
  }
  if (m_recovery.header != "valid") {
    if (!mismatch.empty()) {
      m_recovery.header = mismatch;
      if (mismatch != "foreign") {
        // Count what the index held, in the header's own table (another block size has another number of
        // blocks; the table starts at the same offset), read only within this region.
        uint64_t n = 0;
        const uint64_t fit = m_bytes > m_table_offset ? (m_bytes - m_table_offset) / kEntryBytes : 0;
        const uint64_t entries = h->table_offset == m_table_offset ? std::min<uint64_t>(h->num_blocks, fit) : 0;
        for (uint64_t b = 0; b < entries; ++b)
          if (entry(static_cast<int>(b))->state.load(std::memory_order_acquire) != 0) ++n;
        m_recovery.dropped[mismatch] = n;
      }
    }
    init_header();
    for (uint64_t b = 0; b < m_num_blocks; ++b) {
      m_free_pos[b] = m_free.insert(m_free.end(), static_cast<int>(b));
      m_is_free[b] = true;
    }
    return;
  }
  // Check every published entry on its own, then the chains by depth.
  struct Cand {
    int b;
    uint64_t depth;
  };
  std::vector<Cand> cands;
  auto drop = [&](int b, const char* why) {
    ++m_recovery.dropped[why];
    unpublish_locked(b);
  };
  const int max_token = kEos;
  for (uint64_t i = 0; i < m_num_blocks; ++i) {
    const int b = static_cast<int>(i);
    Entry* e = entry(b);
    const uint64_t st = e->state.load(std::memory_order_acquire);
    if (st == 0) continue;
    if (st != kPublished) {
      drop(b, "torn");
      continue;
    }
    if (e->checksum != checksum_of(b)) {
      drop(b, "checksum");
      continue;
    }
    const int* tok = block_tokens_of(b);
    bool ok = e->generation < m_generation &&
              (e->depth + 1) * static_cast<uint64_t>(m_block_tokens) <= static_cast<uint64_t>(m_identity.config.max_seq);
    for (int k = 0; ok && k < m_block_tokens; ++k) ok = tok[k] >= 0 && tok[k] <= max_token;
    if (!ok || kv_block_hash(m_identity_hash, e->parent, tok, m_block_tokens) != e->hash) {
      drop(b, "hash");
      continue;
    }
    cands.push_back({b, e->depth});
  }
  std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& c) { return a.depth < c.depth; });
  std::vector<std::pair<uint64_t, int>> order;  // (last_used, block) of the recovered blocks
  for (const auto& c : cands) {
    Entry* e = entry(c.b);
    if (m_index.count(e->hash)) {
      drop(c.b, "duplicate");
      continue;
    }
    bool linked = c.depth == 0 ? e->parent == 0 : false;
    if (c.depth > 0) {
      auto p = m_index.find(e->parent);
      linked = p != m_index.end() && entry(p->second)->depth + 1 == c.depth;
    }
    if (!linked) {
      drop(c.b, "orphan");  // its prefix is not there: no request can ever reach it
      continue;
    }
    m_index[e->hash] = c.b;
    m_hash[static_cast<size_t>(c.b)] = e->hash;
    order.emplace_back(e->last_used.load(std::memory_order_relaxed), c.b);
    m_clock = std::max(m_clock, order.back().first);
  }
  m_recovery.recovered = m_index.size();
  std::sort(order.begin(), order.end());
  // Unindexed blocks first (nothing to lose), then the recovered ones least recently used first.
  for (uint64_t b = 0; b < m_num_blocks; ++b)
    if (m_hash[b] == 0) {
      m_free_pos[b] = m_free.insert(m_free.end(), static_cast<int>(b));
      m_is_free[b] = true;
    }
  for (const auto& [_, b] : order) {
    m_free_pos[static_cast<size_t>(b)] = m_free.insert(m_free.end(), b);
    m_is_free[static_cast<size_t>(b)] = true;
  }
  // This holder owns the index now: a later holder must see an older generation.
  h->writer_generation = m_generation;
  h->checksum = XXH64(&h->version, offsetof(Header, checksum) - offsetof(Header, version), m_identity_hash);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void KvCache::resync(uint64_t generation) {
  std::lock_guard lk(m_mutex);
  m_index.clear();
  m_free.clear();
  m_refs.assign(m_num_blocks, 0);
  m_hash.assign(m_num_blocks, 0);
  m_is_free.assign(m_num_blocks, false);
  m_recovery = {};
  m_generation = generation;
  recover();
}

int KvCache::allocate_locked() {
  if (m_free.empty()) return -1;
  const int b = m_free.front();
  m_free.pop_front();
  m_is_free[static_cast<size_t>(b)] = false;
  if (uint64_t h = m_hash[static_cast<size_t>(b)]; h != 0) {  // evict the least recently used indexed block
    m_index.erase(h);
    m_hash[static_cast<size_t>(b)] = 0;
    ++m_evicted;
  }
  unpublish_locked(b);
  m_refs[static_cast<size_t>(b)] = 1;
  return b;
}

void KvCache::release_locked(int b) {
  const auto i = static_cast<size_t>(b);
  if (m_refs[i] <= 0 || --m_refs[i] > 0) return;
  if (m_hash[i] == 0) {
    m_free_pos[i] = m_free.insert(m_free.begin(), b);  // useless once free: reused first
  } else {
    entry(b)->last_used.store(++m_clock, std::memory_order_relaxed);
    m_free_pos[i] = m_free.insert(m_free.end(), b);
  }
  m_is_free[i] = true;
}

std::unique_ptr<KvCache::Seq> KvCache::begin(const std::vector<int>& prompt) {
  std::unique_ptr<Seq> s(new Seq(*this));
  const int n = static_cast<int>(prompt.size());
  const int limit = n > 0 ? (n - 1) / m_block_tokens : 0;  // the last prompt token is always computed
  std::lock_guard lk(m_mutex);
  ++m_requests;
  m_query_tokens += static_cast<uint64_t>(n);
  uint64_t parent = 0;
  for (int i = 0; i < limit; ++i) {
    const int* tok = prompt.data() + static_cast<ptrdiff_t>(i) * m_block_tokens;
    const uint64_t h = kv_block_hash(m_identity_hash, parent, tok, m_block_tokens);
    auto it = m_index.find(h);
    if (it == m_index.end()) break;
    const int b = it->second;
    // The hash names the prefix; the stored tokens and parent must agree too (a 64-bit collision serves nothing).
    if (entry(b)->parent != parent ||
        std::memcmp(block_tokens_of(b), tok, static_cast<size_t>(m_block_tokens) * sizeof(int)) != 0)
      break;
    const auto bi = static_cast<size_t>(b);
    if (m_is_free[bi]) {
      m_free.erase(m_free_pos[bi]);
      m_is_free[bi] = false;
    }
    ++m_refs[bi];
    s->m_blocks.push_back(b);
    s->m_hashes.push_back(h);
    parent = h;
  }
  s->m_cached = static_cast<int>(s->m_blocks.size()) * m_block_tokens;
  s->m_tokens.assign(prompt.begin(), prompt.begin() + s->m_cached);
  m_hit_tokens += static_cast<uint64_t>(s->m_cached);
  return s;
}

KvCache::Seq::~Seq() {
  std::lock_guard lk(m_c.m_mutex);
  // Last block first, as vLLM frees: a chain's tail gets the older stamp and is evicted before its head,
  // so eviction never leaves an indexed block whose parent is gone (an orphan at recovery).
  for (auto it = m_blocks.rbegin(); it != m_blocks.rend(); ++it) m_c.release_locked(*it);
}

bool KvCache::Seq::ensure(int t) {
  const int bt = m_c.m_block_tokens;
  if (t / bt < static_cast<int>(m_blocks.size())) return true;
  if (m_full) return false;
  std::lock_guard lk(m_c.m_mutex);
  const int b = m_c.allocate_locked();
  if (b < 0) {
    ++m_c.m_no_block;
    m_full = true;
    return false;
  }
  m_blocks.push_back(b);
  return true;
}

float* KvCache::Seq::row(int l, int kind, int t) const {
  const int bt = m_c.m_block_tokens;
  const int b = m_blocks[static_cast<size_t>(t / bt)];
  auto* kv = reinterpret_cast<float*>(m_c.block(b) + align_up(static_cast<uint64_t>(bt) * sizeof(int32_t), 64));
  return kv + ((static_cast<size_t>(l) * 2 + static_cast<size_t>(kind)) * static_cast<size_t>(bt) +
               static_cast<size_t>(t % bt)) * m_c.m_row_floats;
}

void KvCache::Seq::done(int t, int token) {
  const int bt = m_c.m_block_tokens;
  m_c.block_tokens_of(m_blocks[static_cast<size_t>(t / bt)])[t % bt] = token;
  m_tokens.push_back(token);
  if (t % bt == bt - 1) m_c.publish(*this, t / bt);
}

void KvCache::publish(Seq& s, int index) {
  const uint64_t parent = index == 0 ? 0 : s.m_hashes[static_cast<size_t>(index - 1)];
  const int b = s.m_blocks[static_cast<size_t>(index)];
  const uint64_t h = kv_block_hash(m_identity_hash, parent, block_tokens_of(b), m_block_tokens);
  s.m_hashes.push_back(h);
  std::lock_guard lk(m_mutex);
  if (m_index.count(h)) return;  // another request published the same prefix first: this copy stays private
  Entry* e = entry(b);
  e->hash = h;
  e->parent = parent;
  e->depth = static_cast<uint64_t>(index);
  e->generation = m_generation;
  e->checksum = checksum_of(b);
  // The block's bytes and the fields above are written: only now does the entry name them.
  e->state.store(kPublished, std::memory_order_release);
  m_index[h] = b;
  m_hash[static_cast<size_t>(b)] = h;
  ++m_published;
}

nlohmann::json KvCache::stats() const {
  std::lock_guard lk(m_mutex);
  nlohmann::json dropped = nlohmann::json::object();
  for (const auto& [k, v] : m_recovery.dropped) dropped[k] = v;
  return {{"enabled", true},
          {"location", m_arena ? "arena" : "private"},
          {"block_tokens", m_block_tokens},
          {"blocks", m_num_blocks},
          {"block_bytes", m_block_bytes},
          {"blocks_indexed", m_index.size()},
          {"blocks_free", m_free.size()},
          {"generation", m_generation},
          {"recovery",
           {{"header", m_recovery.header},
            {"previous_generation", m_recovery.previous_generation},
            {"recovered", m_recovery.recovered},
            {"dropped", dropped},
            {"dropped_total", m_recovery.dropped_total()}}},
          {"prefix",
           {{"requests", m_requests},
            {"query_tokens", m_query_tokens},
            {"hit_tokens", m_hit_tokens},
            {"hit_rate", m_query_tokens ? static_cast<double>(m_hit_tokens) / static_cast<double>(m_query_tokens) : 0.0}}},
          {"published", m_published},
          {"evicted", m_evicted},
          {"no_free_block", m_no_block}};
}

std::string KvCache::summary() const {
  std::string reasons;
  for (const auto& [k, v] : m_recovery.dropped) reasons += (reasons.empty() ? "" : ",") + k + "=" + std::to_string(v);
  return "location=" + std::string(m_arena ? "arena" : "private") + " blocks=" + std::to_string(m_num_blocks) +
         " block_tokens=" + std::to_string(m_block_tokens) + " header=" + m_recovery.header +
         " recovered=" + std::to_string(m_recovery.recovered) + " dropped=" + std::to_string(m_recovery.dropped_total()) +
         (reasons.empty() ? "" : " dropped_by=" + reasons);
}

}  // namespace fr::te
