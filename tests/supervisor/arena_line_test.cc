// The engine's arena line (supervisor/arena_line.h): the two documented forms, and malformed input of every
// kind is refused with a reason, never a crash or a partial record.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "fastrestart/arena.h"
#include "supervisor/arena_line.h"
#include "supervisor/arena_outcome.h"

namespace fr::supervisor {
namespace {

ArenaLine ok_line(const std::string& l) {
  auto r = parse_arena_line(l);
  EXPECT_TRUE(r.ok()) << l << ": " << (r.ok() ? "" : r.error().message);
  EXPECT_TRUE(r.ok() && r->has_value()) << l;
  return r.ok() && r->has_value() ? **r : ArenaLine{};
}

std::string error_of(const std::string& l) {
  auto r = parse_arena_line(l);
  EXPECT_FALSE(r.ok()) << l;
  return r.ok() ? "" : r.error().message;
}

// engine_loader's writer of the fallback line (fastrestart::arena_fallback_line) makes lines this parser
// reads back: quotes and backslashes escaped, whitespace runs as one space, long reasons within bounds.
TEST(ArenaLine, EngineLoadersFallbackLineParsesBack) {
  const std::string cases[] = {"arena_lease.wait_s: arena 'kv' is still leased to pid 4321",
                               "a \"quoted\" \\ back\\slash",
                               "two\nlines\tand  spaces ",
                               std::string(3000, 'r') + "\xc3\xa9"};
  const std::string want[] = {"arena_lease.wait_s: arena 'kv' is still leased to pid 4321",
                              "a \"quoted\" \\ back\\slash", "two lines and spaces", std::string(512, 'r')};
  for (size_t i = 0; i < std::size(cases); ++i) {
    const std::string line = fastrestart::arena_fallback_line(cases[i]);
    EXPECT_LE(line.size(), kMaxArenaLine) << line;
    const ArenaLine a = ok_line("[2026-01-01 00:00:00.000] [warning] " + line);
    EXPECT_EQ(a.outcome, "fallback");
    EXPECT_EQ(a.reason, want[i]) << line;
  }
}

// docs/supervisor.md, "KV arenas": the lines exactly as documented.
TEST(ArenaLine, TheDocumentedLeasedLine) {
  const ArenaLine a = ok_line("fastrestart-arena: leased name=kv bytes=107374182400 waited_s=0.081 swap_s=0.003 generation=4");
  EXPECT_EQ(a.outcome, "leased");
  EXPECT_EQ(a.name, "kv");
  EXPECT_EQ(a.bytes, 107374182400u);
  EXPECT_DOUBLE_EQ(a.waited_s, 0.081);
  EXPECT_DOUBLE_EQ(a.swap_s, 0.003);
  EXPECT_EQ(a.generation, 4u);
  EXPECT_EQ(a.reason, "");
}

TEST(ArenaLine, TheDocumentedFallbackLine) {
  const ArenaLine a = ok_line(R"(fastrestart-arena: fallback reason="arena_lease.wait_s: arena 'kv' is still leased to pid 4321")");
  EXPECT_EQ(a.outcome, "fallback");
  EXPECT_EQ(a.reason, "arena_lease.wait_s: arena 'kv' is still leased to pid 4321");
}

// The parsed line is status's record itself: the parser leaves pid and unix_time to arena_outcome_of_line.
TEST(ArenaLine, TheOutcomeIsTheParsedLineWithThePidAndTime) {
  const std::string line = "fastrestart-arena: leased name=kv bytes=4096 waited_s=0.5 swap_s=0.25 generation=2";
  const ArenaLine a = ok_line(line);
  EXPECT_EQ(a.pid, 0);
  EXPECT_EQ(a.unix_time, 0);
  auto o = arena_outcome_of_line(line, 4321);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->pid, 4321);
  EXPECT_GT(o->unix_time, 0);
  EXPECT_EQ(o->outcome, "leased");
  EXPECT_EQ(o->name, "kv");
  EXPECT_EQ(o->bytes, 4096u);
  EXPECT_DOUBLE_EQ(o->waited_s, 0.5);
  EXPECT_DOUBLE_EQ(o->swap_s, 0.25);
  EXPECT_EQ(o->generation, 2u);
  EXPECT_FALSE(arena_outcome_of_line("fastrestart-arena: leased name=kv", 4321).has_value());  // malformed
  EXPECT_FALSE(arena_outcome_of_line("no marker here", 4321).has_value());
}

TEST(ArenaLine, AfterALoggersPrefixInAnyOrderWithExtraKeys) {
  const ArenaLine a = ok_line("INFO 12-02 18:00:01 [worker.py:10] fastrestart-arena:   leased\tgeneration=1 swap_s=0 "
                              "rank=0 name=kv.0 waited_s=12 bytes=1");
  EXPECT_EQ(a.name, "kv.0");
  EXPECT_EQ(a.bytes, 1u);
  EXPECT_DOUBLE_EQ(a.waited_s, 12);
  EXPECT_EQ(a.generation, 1u);
}

TEST(ArenaLine, QuotedReasonsKeepEscapedQuotesAndBackslashes) {
  EXPECT_EQ(ok_line(R"(fastrestart-arena: fallback reason="a \"b\" c\\d" code=7)").reason, R"(a "b" c\d)");
  EXPECT_EQ(ok_line("fastrestart-arena: fallback reason=daemon_lost").reason, "daemon_lost");
  EXPECT_EQ(ok_line(R"(fastrestart-arena: fallback reason="\n stays two characters")").reason, R"(\n stays two characters)");
}

TEST(ArenaLine, LinesWithoutTheMarkerAreNotArenaLines) {
  for (const char* l : {"", "fastrestart-progress: phase=x done=1 total=2", "fastrestart-arena leased name=kv",
                        "FASTRESTART-ARENA: leased"}) {
    auto r = parse_arena_line(l);
    ASSERT_TRUE(r.ok()) << l;
    EXPECT_FALSE(r->has_value()) << l;
  }
}

TEST(ArenaLine, MalformedLinesSayWhy) {
  EXPECT_EQ(error_of("fastrestart-arena:"), "fastrestart-arena: outcome \"\" is neither leased nor fallback");
  EXPECT_EQ(error_of("fastrestart-arena: granted name=kv"), "fastrestart-arena: outcome \"granted\" is neither leased nor fallback");
  EXPECT_EQ(error_of("fastrestart-arena: leased name=kv bytes=0 waited_s=0 swap_s=0 generation=1"),
            "fastrestart-arena: leased: bytes: missing, or not an integer > 0");
  EXPECT_EQ(error_of("fastrestart-arena: leased name=kv bytes=5 waited_s=-1 swap_s=0 generation=1"),
            "fastrestart-arena: leased: waited_s: missing, or not a decimal >= 0");
  EXPECT_EQ(error_of("fastrestart-arena: leased name=kv bytes=5 waited_s=0 swap_s=0"),
            "fastrestart-arena: leased: generation: missing, or not an integer > 0");
  EXPECT_EQ(error_of("fastrestart-arena: leased name=k/v bytes=5 waited_s=0 swap_s=0 generation=1"),
            "fastrestart-arena: leased: name: missing, or not 1-64 of A-Z a-z 0-9 _ . -");
  EXPECT_EQ(error_of("fastrestart-arena: leased name=kv name=kv bytes=5 waited_s=0 swap_s=0 generation=1"),
            "fastrestart-arena: name: given twice");
  EXPECT_EQ(error_of(R"(fastrestart-arena: fallback reason="never closed)"), "fastrestart-arena: reason: unterminated quote");
  EXPECT_EQ(error_of(R"(fastrestart-arena: fallback reason="a"b)"), "fastrestart-arena: reason: text after the closing quote");
  EXPECT_EQ(error_of("fastrestart-arena: fallback reason="), "fastrestart-arena: fallback: reason is missing or empty");
  EXPECT_EQ(error_of("fastrestart-arena: fallback because"), "fastrestart-arena: a word without '=': \"because\"");
  EXPECT_EQ(error_of("fastrestart-arena: fallback =x"), "fastrestart-arena: a value without a key");
}

TEST(ArenaLine, NumbersOutOfRangeOrNotNumbers) {
  const std::string head = "fastrestart-arena: leased name=kv waited_s=0 swap_s=0 generation=1 bytes=";
  for (const char* b : {"18446744073709551616", "-1", "1e9", "0x10", "12abc", " ", "+5", "1.5"})
    EXPECT_FALSE(parse_arena_line(head + b).ok()) << b;
  EXPECT_EQ(ok_line(head + "18446744073709551615").bytes, 18446744073709551615ull);
  const std::string h2 = "fastrestart-arena: leased name=kv bytes=1 swap_s=0 generation=1 waited_s=";
  for (const char* w : {"nan", "inf", "1e400", "1e3", "", "0.5s", "--1"}) EXPECT_FALSE(parse_arena_line(h2 + w).ok()) << w;
}

TEST(ArenaLine, BoundedLengths) {
  const std::string big(kMaxArenaLine, 'x');
  EXPECT_EQ(error_of("fastrestart-arena: fallback reason=" + big),
            "fastrestart-arena: line of " + std::to_string(35 + big.size()) + " bytes, over 4096");
  // A long reason is cut, on a UTF-8 character's start, and says so.
  std::string reason;
  while (reason.size() < kMaxArenaReason + 10) reason += "\xc3\xa9";  // é
  const ArenaLine a = ok_line("fastrestart-arena: fallback reason=\"" + reason + "\"");
  EXPECT_LE(a.reason.size(), kMaxArenaReason + 3);
  EXPECT_EQ(a.reason.substr(a.reason.size() - 3), "...");
  EXPECT_EQ(a.reason.size() % 2, 1u);  // whole two-byte characters, then "..."
  EXPECT_FALSE(parse_arena_line(std::string("fastrestart-arena: fallback reason=a\0b", 38)).ok());
}

// Fuzz-like: random mutations of the two valid lines never crash, and whatever parses is well-formed.
TEST(ArenaLine, RandomMutationsNeverCrashOrYieldPartialRecords) {
  const std::string seeds[] = {
      "fastrestart-arena: leased name=kv bytes=107374182400 waited_s=0.081 swap_s=0.003 generation=4",
      R"(fastrestart-arena: fallback reason="a \"quoted\" reason")"};
  const std::string alphabet = "=\" \\\t\r0123456789.-ekvnamebytsgfallbackleased\xff\xc3";
  std::mt19937 rng(28);
  for (int i = 0; i < 20000; ++i) {
    std::string l = seeds[i % 2];
    const int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits && !l.empty(); ++e) {
      const size_t at = rng() % l.size();
      switch (rng() % 4) {
        case 0: l[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: l.erase(at, 1 + rng() % 4); break;
        case 2: l.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        default: l = l.substr(0, at); break;
      }
    }
    auto r = parse_arena_line(l);
    if (!r.ok() || !r->has_value()) continue;
    const ArenaLine& a = **r;
    if (a.outcome == "leased") {
      EXPECT_FALSE(a.name.empty()) << l;
      EXPECT_GT(a.bytes, 0u) << l;
      EXPECT_GT(a.generation, 0u) << l;
      EXPECT_GE(a.waited_s, 0) << l;
      EXPECT_GE(a.swap_s, 0) << l;
    } else {
      EXPECT_FALSE(a.reason.empty()) << l;
      EXPECT_LE(a.reason.size(), kMaxArenaReason + 3) << l;
    }
  }
}

}  // namespace
}  // namespace fr::supervisor
