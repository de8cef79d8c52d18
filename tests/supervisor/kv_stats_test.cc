// The engine's KV cache survival word (supervisor/kv_stats.h; engine_loader's fastrestart/kv_stats.h): the
// text an engine writes parses back to the same figures, a counters file is used only when it is the
// printing engine's own, and a malformed file is refused with a message naming the file and the field.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "fastrestart/kv_stats.h"
#include "support/harness.h"
#include "supervisor/kv_stats.h"

namespace fr::supervisor {
namespace {

fastrestart::KvStats kv_sample_stats() {
  fastrestart::KvStats s;
  s.location = "arena";
  s.header = "valid";
  s.blocks = 64;
  s.block_tokens = 16;
  s.recovered = 58;
  s.dropped = {{"orphan", 3}, {"checksum", 1}};
  s.requests = 5;
  s.query_tokens = 1000;
  s.hit_tokens = 896;
  return s;
}

std::string kv_parse_error(const std::string& text) {
  auto r = parse_kv_stats(text);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? "" : r.error().message;
}

void kv_write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(KvStats, TheEngineLoadersTextParsesBack) {
  const std::string line = kv_stats_text(kv_sample_stats(), "0123abcd");
  EXPECT_EQ(line.rfind("fastrestart-kv: id=0123abcd ", 0), 0u) << line;
  // After a logger's prefix, as the engine prints it.
  auto r = parse_kv_stats("[2026-12-05 05:00:00.000] [info] " + line);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->has_value());
  KvStatsRecord k = **r;
  EXPECT_EQ(k.id, "0123abcd");
  EXPECT_EQ(k.kv.location, "arena");
  EXPECT_EQ(k.kv.header, "valid");
  EXPECT_EQ(k.kv.blocks, 64u);
  EXPECT_EQ(k.kv.block_tokens, 16u);
  EXPECT_EQ(k.kv.recovered, 58u);
  EXPECT_EQ(k.kv.dropped_by, (std::map<std::string, uint64_t>{{"checksum", 1}, {"orphan", 3}}));
  EXPECT_EQ(k.kv.dropped(), 4u);
  EXPECT_EQ(k.kv.requests, 5u);
  EXPECT_EQ(k.kv.query_tokens, 1000u);
  EXPECT_EQ(k.kv.hit_tokens, 896u);
  ASSERT_TRUE(k.kv.hit_rate());
  EXPECT_DOUBLE_EQ(*k.kv.hit_rate(), 0.896);
  k.kv.pid = 42;
  EXPECT_EQ(kv_cache_text(k.kv),
            "pid 42 arena, 64 blocks of 16 tokens, header valid: 58 recovered, 4 dropped (checksum 1, orphan 3); "
            "prefix hits 896 of 1000 tokens (89.6%) in 5 requests");
  // Not a kv line at all.
  auto none = parse_kv_stats("kv cache: location=arena blocks=64");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(KvStats, MalformedTextNamesTheField) {
  const std::string good = kv_stats_text(kv_sample_stats(), "ab12");
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  EXPECT_NE(kv_parse_error(replace("hit_tokens=896", "hit_tokens=lots")).find("hit_tokens: not an unsigned integer"), std::string::npos);
  EXPECT_NE(kv_parse_error(replace("hit_tokens=896", "hit_tokens=-1")).find("hit_tokens"), std::string::npos);
  EXPECT_NE(kv_parse_error(replace("hit_tokens=896", "hit_tokens=1001")).find("hit_tokens: 1001 is more than query_tokens 1000"),
            std::string::npos);
  EXPECT_NE(kv_parse_error(replace(" recovered=58", "")).find("recovered: missing"), std::string::npos);
  EXPECT_NE(kv_parse_error(replace("recovered=58", "recovered=58 recovered=59")).find("recovered: given twice"), std::string::npos);
  EXPECT_NE(kv_parse_error(replace("id=ab12", "id=XYZ")).find("id: "), std::string::npos);
  EXPECT_NE(kv_parse_error(replace("header=valid", "header=\"a b\"")).find("a word that is not key=value"), std::string::npos);
  EXPECT_NE(kv_parse_error(replace("dropped.orphan=3", "dropped.orphan=3x")).find("dropped.orphan: not an unsigned integer"),
            std::string::npos);
  EXPECT_NE(kv_parse_error(replace("dropped.orphan=3", "dropped.=3")).find("dropped.: the reason is not a word"), std::string::npos);
  EXPECT_NE(kv_parse_error(replace("header=valid", "header=" + std::string(kMaxKvStatsText, 'v'))).find("over 4096"), std::string::npos);
  std::string many = good;
  for (size_t i = 0; i <= kMaxKvReasons; ++i) many += " dropped.r" + std::to_string(i) + "=1";
  EXPECT_NE(kv_parse_error(many).find("more than 32 reasons"), std::string::npos);
  // Keys it does not know are ignored.
  EXPECT_TRUE(parse_kv_stats(good + " engine_own=7").ok());
}

TEST(KvStats, TheCountersFileCountsOnlyWhenItIsThisEnginesAndWellFormed) {
  test::TempDir dir;
  const std::string path = dir / "kv-stats";
  fastrestart::KvStats at_start = kv_sample_stats();
  at_start.requests = at_start.query_tokens = at_start.hit_tokens = 0;
  auto line = parse_kv_stats(kv_stats_text(at_start, "aa11"));
  ASSERT_TRUE(line.ok() && line->has_value());
  KvStatsRecord rec = **line;
  rec.kv.pid = 7;

  // No file yet: the line's figures, no error.
  status::KvCacheStatus k = kv_cache_with_file(rec, path);
  EXPECT_EQ(k.counters, "line");
  EXPECT_EQ(k.error, "");
  EXPECT_EQ(k.query_tokens, 0u);
  EXPECT_FALSE(k.hit_rate());

  // The engine's own file (written by engine_loader's reporter): its counters, the line's pid.
  fastrestart::KvStatsReporter reporter(path);
  ASSERT_TRUE(reporter.write(kv_sample_stats()).ok());
  rec.id = reporter.id();
  k = kv_cache_with_file(rec, path);
  EXPECT_EQ(k.counters, "file");
  EXPECT_EQ(k.pid, 7);
  EXPECT_EQ(k.hit_tokens, 896u);
  EXPECT_EQ(k.recovered, 58u);
  EXPECT_EQ(k.error, "");

  // Another engine's file (a previous engine, a standby): not counted, and no fault either.
  rec.id = "ffff";
  k = kv_cache_with_file(rec, path);
  EXPECT_EQ(k.counters, "line");
  EXPECT_EQ(k.query_tokens, 0u);
  EXPECT_EQ(k.error, "");

  // A malformed file: the line's figures, and the error names the file and the field.
  kv_write(path, "fastrestart-kv: id=ffff location=arena header=valid blocks=64 block_tokens=16 recovered=58 requests=5 "
                 "query_tokens=1000 hit_tokens=many\n");
  k = kv_cache_with_file(rec, path);
  EXPECT_EQ(k.counters, "line");
  EXPECT_EQ(k.query_tokens, 0u);
  EXPECT_EQ(k.error, path + ": hit_tokens: not an unsigned integer: \"many\"");
  auto direct = read_kv_stats_file(path);
  ASSERT_FALSE(direct.ok());
  EXPECT_EQ(direct.error().message, k.error);

  kv_write(path, "garbage\n");
  EXPECT_EQ(kv_cache_with_file(rec, path).error, path + ": no fastrestart-kv: text");
  kv_write(path, std::string(kMaxKvStatsText + 10, 'x') + " fastrestart-kv: id=ffff");
  EXPECT_NE(kv_cache_with_file(rec, path).error.find(path + ": over 4096 bytes"), std::string::npos);
}

}  // namespace
}  // namespace fr::supervisor
