// The paged prefix cache (docs/kv-survival.md): bit-identical answers with and without it, the hash chain,
// reference counts and LRU eviction, and the recovery validator over memory a previous holder left behind
// (a block being written, a torn entry, a corrupt block, another identity).
#include "tinyengine/kv_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "support/harness.h"
#include "tinyengine/checkpoint.h"

namespace fr::te {
namespace {

struct KvModel {
  CheckpointInfo info;
  DiskLoad disk;
  Model model;
  uint64_t fingerprint = 0;
};

std::unique_ptr<KvModel> kv_model(uint64_t seed = 11) {
  static fr::test::TempDir dirs;
  const std::string dir = dirs / ("seed" + std::to_string(seed));
  GenOptions o;
  o.seed = seed;
  EXPECT_TRUE(generate_checkpoint(o, dir).ok());
  auto info = inspect_checkpoint(dir);
  EXPECT_TRUE(info.ok());
  auto disk = load_from_disk(*info);
  EXPECT_TRUE(disk.ok());
  auto l = std::make_unique<KvModel>(KvModel{*info, std::move(*disk), {}, 0});
  auto m = Model::bind(l->info.config, l->disk.set.lookup());
  EXPECT_TRUE(m.ok());
  l->model = std::move(*m);
  l->fingerprint = *kv_weights_fingerprint(l->info.config, l->disk.set.lookup());
  return l;
}

bool kv_same(const Generation& a, const Generation& b) {
  if (a.steps.size() != b.steps.size() || a.stopped_on_eos != b.stopped_on_eos) return false;
  for (size_t i = 0; i < a.steps.size(); ++i) {
    if (a.steps[i].token != b.steps[i].token) return false;
    if (std::memcmp(&a.steps[i].logprob, &b.steps[i].logprob, sizeof(float)) != 0) return false;
    if (a.steps[i].top.size() != b.steps[i].top.size()) return false;
    for (size_t k = 0; k < a.steps[i].top.size(); ++k)
      if (a.steps[i].top[k].first != b.steps[i].top[k].first ||
          std::memcmp(&a.steps[i].top[k].second, &b.steps[i].top[k].second, sizeof(float)) != 0)
        return false;
  }
  return true;
}

const std::vector<std::string> kSystemPrompts = {"You are a helpful assistant. Answer briefly.\n",
                                                 "System: the cache must never change an answer.\n"};

std::vector<std::string> kv_prompts() {
  std::vector<std::string> v;
  for (const auto& s : kSystemPrompts)
    for (const char* q : {"What is a block?", "Why hash a chain?", "Who evicts?", "x"}) v.push_back(s + q);
  v.push_back("short");
  v.push_back("a");
  return v;
}

uint64_t kv_stat(const KvCache& c, const char* group, const char* key) { return c.stats()[group][key].get<uint64_t>(); }

// Memory standing in for an arena: it outlives every KvCache opened over it.
struct KvRegion {
  explicit KvRegion(uint64_t bytes) : words(bytes / 8 + 1, 0), size(bytes) {}
  std::vector<uint64_t> words;
  uint64_t size;
  void* base() { return words.data(); }
  std::byte* bytes() { return reinterpret_cast<std::byte*>(words.data()); }
};

// An index entry's fields (the layout docs/kv-survival.md gives): state, hash, parent, depth.
uint64_t* entry_field(KvRegion& r, int b, int field) {
  return reinterpret_cast<uint64_t*>(r.bytes() + 4096 + static_cast<uint64_t>(b) * 64) + field;
}

TEST(TinyKvCache, AnswersAreBitIdenticalWithTheCacheAtEveryBlockSize) {
  auto m = kv_model();
  for (int bt : {1, 3, 4, 16}) {
    auto c = KvCache::open_private({m->info.config, m->fingerprint, bt}, 256);
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    for (int round = 0; round < 2; ++round)
      for (const auto& p : kv_prompts()) {
        const auto want = m->model.generate(tokenize(p), 12, 3);
        EXPECT_TRUE(kv_same(m->model.generate(tokenize(p), 12, 3, c->get()), want)) << "block " << bt << ": " << p;
      }
    EXPECT_GT(kv_stat(**c, "prefix", "hit_tokens"), 0u) << bt;
    EXPECT_GT((*c)->stats()["published"].get<uint64_t>(), 0u);
  }
}

TEST(TinyKvCache, TheHashChainNamesTheWholePrefix) {
  const int a[4] = {1, 2, 3, 4};
  EXPECT_EQ(kv_block_hash(7, 0, a, 4), kv_block_hash(7, 0, a, 4));
  EXPECT_NE(kv_block_hash(7, 0, a, 4), kv_block_hash(7, 5, a, 4));  // same tokens, another prefix
  EXPECT_NE(kv_block_hash(7, 0, a, 4), kv_block_hash(8, 0, a, 4));  // another model or block size
  const int b[4] = {1, 2, 3, 5};
  EXPECT_NE(kv_block_hash(7, 0, a, 4), kv_block_hash(7, 0, b, 4));
  auto m = kv_model();
  KvIdentity id{m->info.config, m->fingerprint, 4};
  KvIdentity other = id;
  other.block_tokens = 8;
  EXPECT_NE(id.hash(), other.hash());
  // Generated tokens fill blocks too: a prompt that repeats a past answer hits past the old prompt.
  auto c = KvCache::open_private(id, 64);
  ASSERT_TRUE(c.ok());
  const std::string p = kSystemPrompts[0];
  const auto g = m->model.generate(tokenize(p), 16, 0, c->get());
  std::vector<int> longer = tokenize(p);
  for (const auto& s : g.steps) longer.push_back(s.token);
  longer.push_back('!');
  const uint64_t before = kv_stat(**c, "prefix", "hit_tokens");
  EXPECT_TRUE(kv_same(m->model.generate(longer, 4, 0, c->get()), m->model.generate(longer, 4, 0)));
  EXPECT_GT(kv_stat(**c, "prefix", "hit_tokens") - before, p.size() - 4);
}

// A stream continued on the next holder (docs/kv-survival.md, "Continued streams"): its prompt is the first
// prompt plus the tokens sent so far. Every block the dead holder filled during decode was published as it
// filled, so at any cut the continuation recomputes only the positions past its last full block, its last
// position always (1..block_tokens), and answers as without the cache.
TEST(TinyKvCache, AContinuationOnTheNextHolderRecomputesAtMostOneBlock) {
  auto m = kv_model();
  for (int bt : {4, 16}) {
    const KvIdentity id{m->info.config, m->fingerprint, bt};
    KvRegion r(KvCache::bytes_for(id, 64));
    const std::vector<int> prompt = tokenize("Once upon a time, in a cache far away,");
    const int max_tokens = 40;
    std::vector<int> sent = prompt;
    {
      auto dying = KvCache::open(id, r.base(), r.size, 1);
      ASSERT_TRUE(dying.ok());
      const auto g = m->model.generate(prompt, max_tokens, 0, dying->get());
      for (const auto& s : g.steps) sent.push_back(s.token);
      ASSERT_FALSE(g.stopped_on_eos);  // the cuts below need every token
      // Decode published the generated tokens' full blocks: all positions it computed (the last token is
      // returned, never fed back).
      EXPECT_EQ((*dying)->stats()["blocks_indexed"].get<int>(), (static_cast<int>(sent.size()) - 1) / bt) << bt;
    }  // dropped without a word to the memory, as a kill leaves it
    auto next = KvCache::open(id, r.base(), r.size, 2);
    ASSERT_TRUE(next.ok());
    EXPECT_EQ((*next)->recovery().recovered, (sent.size() - 1) / static_cast<size_t>(bt));
    for (int k = 1; k <= max_tokens; k += 3) {
      const std::vector<int> cont(sent.begin(), sent.begin() + static_cast<ptrdiff_t>(prompt.size()) + k);
      const int n = static_cast<int>(cont.size());
      const uint64_t q0 = kv_stat(**next, "prefix", "query_tokens"), h0 = kv_stat(**next, "prefix", "hit_tokens");
      EXPECT_TRUE(kv_same(m->model.generate(cont, max_tokens - k, 0, next->get()), m->model.generate(cont, max_tokens - k, 0)))
          << bt << " " << k;
      const uint64_t recomputed = (kv_stat(**next, "prefix", "query_tokens") - q0) - (kv_stat(**next, "prefix", "hit_tokens") - h0);
      EXPECT_EQ(recomputed, static_cast<uint64_t>(n - (n - 1) / bt * bt)) << "block " << bt << ", cut after " << k;
      EXPECT_GE(recomputed, 1u);
      EXPECT_LE(recomputed, static_cast<uint64_t>(bt));
    }
  }
}

TEST(TinyKvCache, FreeBlocksAreEvictedLeastRecentlyUsedFirst) {
  auto m = kv_model();
  // Four blocks of 4 tokens; a 9-token prompt with one token out fills two blocks and part of a third.
  auto c = KvCache::open_private({m->info.config, m->fingerprint, 4}, 4);
  ASSERT_TRUE(c.ok());
  KvCache& kv = **c;
  const std::string a = "AAAAaaaa1", b = "BBBBbbbb2";
  const auto ga = m->model.generate(tokenize(a), 1, 0), gb = m->model.generate(tokenize(b), 1, 0);
  EXPECT_TRUE(kv_same(m->model.generate(tokenize(a), 1, 0, &kv), ga));
  EXPECT_EQ(kv.stats()["blocks_indexed"], 2);
  EXPECT_TRUE(kv_same(m->model.generate(tokenize(a), 1, 0, &kv), ga));
  EXPECT_EQ(kv_stat(kv, "prefix", "hit_tokens"), 8u);
  // b takes the unindexed block, the never-used one and a's least recently used block: its second, since a
  // request frees its last block first (a chain's tail is evicted before its head, never leaving orphans).
  EXPECT_TRUE(kv_same(m->model.generate(tokenize(b), 1, 0, &kv), gb));
  EXPECT_EQ(kv.stats()["evicted"], 1);
  // a's first block is still there: it hits, the second is computed again, and the answer holds.
  EXPECT_TRUE(kv_same(m->model.generate(tokenize(a), 1, 0, &kv), ga));
  EXPECT_EQ(kv_stat(kv, "prefix", "hit_tokens"), 12u);
  // A referenced block is never evicted: with every block held, a request runs on private rows.
  auto one = KvCache::open_private({m->info.config, m->fingerprint, 4}, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(kv_same(m->model.generate(tokenize(a), 3, 0, one->get()), m->model.generate(tokenize(a), 3, 0)));
  EXPECT_EQ((*one)->stats()["no_free_block"], 1);
}

TEST(TinyKvCache, ConcurrentRequestsShareBlocksAndAgree) {
  auto m = kv_model();
  auto c = KvCache::open_private({m->info.config, m->fingerprint, 4}, 48);
  ASSERT_TRUE(c.ok());
  const auto prompts = kv_prompts();
  std::vector<Generation> want;
  for (const auto& p : prompts) want.push_back(m->model.generate(tokenize(p), 6, 0));
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int r = 0; r < 3; ++r)
        for (size_t i = 0; i < prompts.size(); ++i)
          if (!kv_same(m->model.generate(tokenize(prompts[i]), 6, 0, c->get()), want[i])) ++wrong;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(kv_stat(**c, "prefix", "hit_tokens"), 0u);
}

// Runs every prompt through a cache on `r` leased as `generation`; returns the number of indexed blocks.
uint64_t kv_fill(const KvModel& m, KvRegion& r, const KvIdentity& id, uint64_t generation) {
  auto c = KvCache::open(id, r.base(), r.size, generation);
  EXPECT_TRUE(c.ok()) << c.error().to_string();
  for (const auto& p : kv_prompts()) m.model.generate(tokenize(p), 8, 0, c->get());
  return (*c)->stats()["blocks_indexed"].get<uint64_t>();
}

TEST(TinyKvCache, TheNextHolderRecoversEveryCompleteBlockAndNotTheOneBeingWritten) {
  auto m = kv_model();
  const KvIdentity id{m->info.config, m->fingerprint, 4};
  KvRegion r(KvCache::bytes_for(id, 128));
  const uint64_t indexed = kv_fill(*m, r, id, 1);
  ASSERT_GT(indexed, 0u);
  // A holder that dies mid-prefill: its block is written, never published.
  auto dying = KvCache::open(id, r.base(), r.size, 2);
  ASSERT_TRUE(dying.ok());
  EXPECT_EQ((*dying)->recovery().recovered, indexed);
  auto seq = (*dying)->begin(tokenize("zzzzzzzzzzzzzzzzzzzz"));
  ASSERT_TRUE(seq->ensure(0));
  for (int l = 0; l < m->info.config.n_layers; ++l) std::memset(seq->row(l, 0, 0), 0x7f, 16);
  for (int t = 0; t < 3; ++t) {
    if (t > 0) {
      ASSERT_TRUE(seq->ensure(t));
    }
    seq->done(t, 'z');
  }
  auto next = KvCache::open(id, r.base(), r.size, 3);
  ASSERT_TRUE(next.ok());
  KvCache& kv = **next;
  EXPECT_EQ(kv.recovery().header, "valid");
  EXPECT_EQ(kv.recovery().previous_generation, 2u);
  EXPECT_EQ(kv.recovery().recovered, indexed);
  EXPECT_EQ(kv.recovery().dropped_total(), 0u);
  for (const auto& p : kv_prompts())
    EXPECT_TRUE(kv_same(m->model.generate(tokenize(p), 8, 0, &kv), m->model.generate(tokenize(p), 8, 0))) << p;
  EXPECT_GT(kv_stat(kv, "prefix", "hit_tokens"), 0u);
  seq.reset();
}

TEST(TinyKvCache, TornCorruptAndUnlinkedEntriesAreDropped) {
  auto m = kv_model();
  const KvIdentity id{m->info.config, m->fingerprint, 4};
  KvRegion r(KvCache::bytes_for(id, 128));
  const uint64_t indexed = kv_fill(*m, r, id, 1);
  // Find two first blocks (depth 0) of different chains.
  std::vector<int> roots;
  for (int b = 0; b < 128; ++b)
    if (*entry_field(r, b, 0) != 0 && *entry_field(r, b, 3) == 0) roots.push_back(b);
  ASSERT_GE(roots.size(), 3u);
  auto children = [&](int root) {
    uint64_t n = 0;
    for (int b = 0; b < 128; ++b)
      if (*entry_field(r, b, 0) != 0 && *entry_field(r, b, 3) > 0) {
        // Walk up the chain by parent hash.
        uint64_t parent = *entry_field(r, b, 2);
        for (int guard = 0; guard < 128 && parent != 0; ++guard) {
          int up = -1;
          for (int u = 0; u < 128; ++u)
            if (*entry_field(r, u, 0) != 0 && *entry_field(r, u, 1) == parent) up = u;
          if (up < 0) break;
          if (up == root) {
            ++n;
            break;
          }
          parent = *entry_field(r, up, 2);
        }
      }
    return n;
  };
  const uint64_t lost = 1 + children(roots[0]) + 1 + children(roots[1]) + 1 + children(roots[2]);
  *entry_field(r, roots[0], 0) = 0x1234;  // a state that is neither free nor published: torn
  *entry_field(r, roots[1], 3) = 1;       // a field changed after publishing: the checksum no longer holds
  // A byte of the third block's token ids changed (checksummed with the K/V rows).
  const uint64_t block_bytes = KvCache::bytes_for(id, 2) - KvCache::bytes_for(id, 1);
  const uint64_t blocks_offset = KvCache::bytes_for(id, 128) - 128 * block_bytes;
  r.bytes()[blocks_offset + static_cast<uint64_t>(roots[2]) * block_bytes] ^= std::byte{1};
  auto c = KvCache::open(id, r.base(), r.size, 2);
  ASSERT_TRUE(c.ok());
  const auto& rec = (*c)->recovery();
  EXPECT_EQ(rec.header, "valid");
  EXPECT_EQ(rec.dropped.at("torn"), 1u);
  EXPECT_EQ(rec.dropped.at("checksum"), 2u);
  EXPECT_EQ(rec.dropped_total(), lost);
  if (lost > 3) {
    EXPECT_EQ(rec.dropped.at("orphan"), lost - 3);
  }
  EXPECT_EQ(rec.recovered, indexed - lost);
  for (const auto& p : kv_prompts())
    EXPECT_TRUE(kv_same(m->model.generate(tokenize(p), 8, 0, c->get()), m->model.generate(tokenize(p), 8, 0))) << p;
}

TEST(TinyKvCache, AnotherIdentityDropsAndZeroesTheWholeIndex) {
  auto m = kv_model();
  auto other = kv_model(12);
  const KvIdentity id{m->info.config, m->fingerprint, 4};
  ASSERT_NE(m->fingerprint, other->fingerprint);
  KvRegion r(KvCache::bytes_for(id, 64));
  const uint64_t indexed = kv_fill(*m, r, id, 1);
  ASSERT_GT(indexed, 0u);
  {
    auto c = KvCache::open({other->info.config, other->fingerprint, 4}, r.base(), r.size, 2);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ((*c)->recovery().header, "identity");
    EXPECT_EQ((*c)->recovery().dropped.at("identity"), indexed);
    EXPECT_EQ((*c)->recovery().recovered, 0u);
  }
  // The index was zeroed: going back to the first identity finds nothing to drop, and nothing recovered.
  auto back = KvCache::open(id, r.base(), r.size, 3);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ((*back)->recovery().header, "identity");
  EXPECT_EQ((*back)->recovery().dropped.at("identity"), 0u);
  EXPECT_EQ((*back)->recovery().recovered, 0u);
  // Another block size is another identity; a generation not older than the writer's is refused.
  const uint64_t refilled = kv_fill(*m, r, id, 4);
  auto bs = KvCache::open({m->info.config, m->fingerprint, 8}, r.base(), r.size, 5);
  ASSERT_TRUE(bs.ok());
  EXPECT_EQ((*bs)->recovery().header, "identity");
  EXPECT_EQ((*bs)->recovery().dropped.at("identity"), refilled);  // counted in the old layout's own table
  bs->reset();
  kv_fill(*m, r, id, 6);
  auto same_gen = KvCache::open(id, r.base(), r.size, 6);
  ASSERT_TRUE(same_gen.ok());
  EXPECT_EQ((*same_gen)->recovery().header, "generation");
  EXPECT_EQ((*same_gen)->recovery().recovered, 0u);
  // Memory that is not a KV index at all (a pattern) is laid out fresh.
  same_gen->reset();
  std::memset(r.base(), 0x6b, r.size);
  auto fresh = KvCache::open(id, r.base(), r.size, 7);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ((*fresh)->recovery().header, "foreign");
  EXPECT_TRUE(kv_same(m->model.generate(tokenize("after a pattern"), 4, 0, fresh->get()),
                      m->model.generate(tokenize("after a pattern"), 4, 0)));
}

TEST(TinyKvCache, TooSmallMemoryIsAClearError) {
  auto m = kv_model();
  KvRegion r(8192);
  auto c = KvCache::open({m->info.config, m->fingerprint, 16}, r.base(), r.size, 1);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("hold no block"), std::string::npos) << c.error().message;
}

}  // namespace
}  // namespace fr::te
