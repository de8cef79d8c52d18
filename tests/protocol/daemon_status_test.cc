// The weight daemon's status codec (protocol/daemon_status.h): a round trip, the documented wire form, and
// errors that name the mistyped field.
#include "protocol/daemon_status.h"

#include <gtest/gtest.h>

namespace fr::proto {
namespace {

using nlohmann::json;

DaemonStatus sample() {
  DaemonStatus s;
  s.backend = "host";
  s.gpu_uuid = "host";
  s.gpu_name = "host memory";
  s.pid = 1234;
  s.held_bytes = 2147483648ull;
  s.clients = 3;
  DaemonEntryStatus e;
  e.fingerprint = "9f1c2b3a4d5e6f70";
  e.state = "loading";
  e.source = "preload";
  e.pool_bytes = 4096;
  e.data_bytes = 4000;
  e.tensors = 291;
  e.files = {"/models/a.safetensors"};
  e.config = {{"dtype", "bf16"}};
  e.progress = {1073741824ull, 2147483648ull, 0.51, 2.1e9};
  e.attaches = {{4321, 0, "zero_copy", 1764480000.5}};
  s.entries.push_back(e);
  DaemonEntryStatus f = e;
  f.state = "failed";
  f.error = "read /models/a.safetensors: EIO";
  f.digest = "0123456789abcdef";
  s.entries.push_back(f);
  s.misses = {{4321, 0, "no entries", 1764480000.4}};
  s.arena_bytes = 2 * 107374182400ull;
  DaemonArenaStatus a;
  a.name = "kv";
  a.bytes = a.pool_bytes = 107374182400ull;
  a.holder_pid = 4321;
  a.leases = 3;
  a.generation = 3;
  a.last_wait_s = 0.083;
  s.arenas.push_back(a);
  a.name = "kv.1";
  a.holder_pid.reset();
  a.last_wait_s.reset();
  a.leases = 1;
  s.arenas.push_back(a);
  return s;
}

TEST(DaemonStatusCodec, RoundTrips) {
  const json wire = to_json(sample());
  auto back = daemon_status_from_json(wire);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(to_json(*back), wire);
  EXPECT_EQ(back->entries[1].error.value_or(""), "read /models/a.safetensors: EIO");
  EXPECT_EQ(back->misses[0].mode, "no entries");
  ASSERT_EQ(back->arenas.size(), 2u);
  EXPECT_EQ(back->arenas[0].holder_pid.value_or(0), 4321);
  EXPECT_FALSE(back->arenas[1].holder_pid);
}

// docs/protocol.md, "status": an arena without a holder, or whose lease never waited, says null.
TEST(DaemonStatusCodec, ArenasOnTheWire) {
  json j = to_json(sample());
  EXPECT_EQ(j["arena_bytes"], 2 * 107374182400ull);
  EXPECT_EQ(j["arenas"][0]["name"], "kv");
  EXPECT_EQ(j["arenas"][0]["holder_pid"], 4321);
  EXPECT_EQ(j["arenas"][0]["last_wait_s"], 0.083);
  EXPECT_EQ(j["arenas"][0]["generation"], 3);
  EXPECT_TRUE(j["arenas"][1]["holder_pid"].is_null());
  EXPECT_TRUE(j["arenas"][1]["last_wait_s"].is_null());
  j["arenas"][0]["leases"] = -1;
  auto s = daemon_status_from_json(j);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "daemon_status.arenas[0].leases: not an unsigned integer");
  j = to_json(sample());
  j.erase("arenas");  // a daemon from before arenas
  s = daemon_status_from_json(j);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_TRUE(s->arenas.empty());
}

// docs/protocol.md, "status": digest and error are null when absent; a miss names its reason.
TEST(DaemonStatusCodec, WireFormIsTheDocumentedOne) {
  json j = to_json(sample());
  EXPECT_TRUE(j["entries"][0]["digest"].is_null());
  EXPECT_TRUE(j["entries"][0]["error"].is_null());
  EXPECT_EQ(j["entries"][1]["digest"], "0123456789abcdef");
  EXPECT_EQ(j["entries"][0]["progress"]["elapsed_s"], 0.51);
  EXPECT_EQ(j["entries"][0]["attaches"][0]["mode"], "zero_copy");
  EXPECT_EQ(j["misses"][0]["reason"], "no entries");
  EXPECT_FALSE(j["misses"][0].contains("mode"));
  j["ok"] = true;  // a whole reply decodes
  EXPECT_TRUE(daemon_status_from_json(j).ok());
}

TEST(DaemonStatusCodec, MalformedStatusNamesTheField) {
  json j = to_json(sample());
  j["entries"][0]["progress"]["done_bytes"] = "many";
  auto s = daemon_status_from_json(j);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "daemon_status.entries[0].progress.done_bytes: not an unsigned integer");
  j = to_json(sample());
  j["misses"][0]["pid"] = 1.5;
  s = daemon_status_from_json(j);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "daemon_status.misses[0].pid: not an integer");
  j = to_json(sample());
  j["entries"][1]["config"]["dtype"] = 16;
  s = daemon_status_from_json(j);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "daemon_status.entries[1].config.dtype: not a string");
}

}  // namespace
}  // namespace fr::proto
