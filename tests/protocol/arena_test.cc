// The KV-arena codecs (protocol/arena.h): the one name rule, the lease request and reply, the release.
#include <gtest/gtest.h>

#include "protocol/arena.h"

namespace fr::proto {
namespace {

TEST(ArenaCodec, TheNameRule) {
  EXPECT_TRUE(valid_arena_name("kv"));
  EXPECT_TRUE(valid_arena_name("kv.rank-0_A"));
  EXPECT_TRUE(valid_arena_name(std::string(64, 'a')));
  EXPECT_FALSE(valid_arena_name(""));
  EXPECT_FALSE(valid_arena_name(std::string(65, 'a')));
  EXPECT_FALSE(valid_arena_name("kv/x"));
  EXPECT_FALSE(valid_arena_name("k v"));
  EXPECT_FALSE(valid_arena_name("\xc3\xa9"));
  auto s = check_arena_name("kv/x", "ArenaOptions.name");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "ArenaOptions.name 'kv/x': not 1-64 of A-Z a-z 0-9 _ . -");
}

TEST(ArenaCodec, TheLeaseRequestRoundTripsAndNamesTheFieldAtFault) {
  ArenaLeaseRequest r{"kv", 1u << 30, 12.5};
  const json j = to_json(r);
  EXPECT_EQ(j["op"], "arena_lease");
  auto back = arena_lease_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->name, "kv");
  EXPECT_EQ(back->bytes, 1u << 30);
  EXPECT_EQ(back->wait_s, 12.5);
  EXPECT_EQ(arena_lease_from_json(json{{"name", "kv"}, {"bytes", 1u}})->wait_s, kDefaultArenaWaitS);
  auto big = arena_lease_from_json(json{{"name", "kv"}, {"bytes", kMaxArenaBytes + 1}});
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().message.rfind("arena_lease.bytes:", 0), 0u);
  auto wait = arena_lease_from_json(json{{"name", "kv"}, {"bytes", 1u}, {"wait_s", 86401}});
  ASSERT_FALSE(wait.ok());
  EXPECT_EQ(wait.error().message.rfind("arena_lease.wait_s:", 0), 0u);
}

TEST(ArenaCodec, TheReplyRoundTripsAndAMalformedOneIsAProtocolError) {
  ArenaLeaseReply r;
  r.name = "kv";
  r.bytes = 4096;
  r.pool_bytes = 8192;
  r.backend = "host";
  r.resized = true;
  r.previous_bytes = 2048;
  r.previous_holder_pid = 42;
  r.waited_s = 0.25;
  r.leases = 3;
  r.generation = 3;
  auto back = arena_lease_reply_from_json(to_json(r));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->pool_bytes, 8192u);
  EXPECT_EQ(back->previous_bytes, 2048u);
  EXPECT_EQ(back->previous_holder_pid, 42);
  EXPECT_TRUE(back->resized);
  EXPECT_FALSE(back->zeroed);
  json bad = to_json(r);
  bad.erase("previous_holder_pid");
  auto e = arena_lease_reply_from_json(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, Errc::kProtocol);
  EXPECT_NE(e.error().message.find("previous_holder_pid"), std::string::npos);
  bad = to_json(r);
  bad["pool_bytes"] = 1;
  EXPECT_FALSE(arena_lease_reply_from_json(bad).ok());
}

TEST(ArenaCodec, TheReleaseRequest) {
  auto r = arena_release_from_json(to_json(ArenaReleaseRequest{"kv"}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->name, "kv");
  auto e = arena_release_from_json(json{{"op", "arena_release"}});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message, "arena_release.name: missing");
}

TEST(ArenaCodec, TheReleaseReplyIsTheDocumentedObject) {
  EXPECT_EQ(to_json(ArenaReleaseReply{"kv", 4096}), (json{{"name", "kv"}, {"freed_bytes", 4096}}));
}

}  // namespace
}  // namespace fr::proto
