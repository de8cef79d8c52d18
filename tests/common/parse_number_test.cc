// Whole-text numbers (common/parse_number.h): what is a number, what is not, and the errors that name the
// field or environment variable at fault.
#include "common/parse_number.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace fr {
namespace {

TEST(ParseNumber, ValidUnsignedIntegers) {
  EXPECT_EQ(to_u64("0"), 0u);
  EXPECT_EQ(to_u64("42"), 42u);
  EXPECT_EQ(to_u64("007"), 7u);
  EXPECT_EQ(to_u64("18446744073709551615"), std::numeric_limits<uint64_t>::max());
  auto r = parse_u64("896", "hit_tokens");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, 896u);
}

TEST(ParseNumber, EmptyTextIsNotANumber) {
  EXPECT_FALSE(to_u64(""));
  EXPECT_FALSE(to_i64(""));
  EXPECT_FALSE(to_decimal(""));
  auto r = parse_u64("", "blocks");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "blocks: not an unsigned integer: \"\"");
}

TEST(ParseNumber, AnUnsignedIntegerHasNoSign) {
  for (const char* t : {"-1", "+1", "-0", "+0", "-", "+"}) EXPECT_FALSE(to_u64(t)) << t;
}

TEST(ParseNumber, ASignedIntegerTakesAMinusButNoPlus) {
  EXPECT_EQ(to_i64("-3"), -3);
  EXPECT_EQ(to_i64("0"), 0);
  EXPECT_EQ(to_i64("-9223372036854775808"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(to_i64("9223372036854775807"), std::numeric_limits<int64_t>::max());
  EXPECT_FALSE(to_i64("+3"));
  EXPECT_FALSE(to_i64("-"));
  EXPECT_FALSE(to_i64("--3"));
}

TEST(ParseNumber, OverflowIsNotANumber) {
  EXPECT_FALSE(to_u64("18446744073709551616"));  // 2^64
  EXPECT_FALSE(to_u64("99999999999999999999999999"));
  EXPECT_FALSE(to_i64("9223372036854775808"));   // 2^63
  EXPECT_FALSE(to_i64("-9223372036854775809"));
  EXPECT_FALSE(to_decimal("1" + std::string(400, '0')));  // past DBL_MAX
  auto r = parse_u64("18446744073709551616", "generation");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "generation: not an unsigned integer: \"18446744073709551616\"");
}

TEST(ParseNumber, TrailingTextIsNotANumber) {
  for (const char* t : {"12x", "1.5", "1,000", "0x10", "1e3", "3k"}) {
    EXPECT_FALSE(to_u64(t)) << t;
    EXPECT_FALSE(to_i64(t)) << t;
  }
  for (const char* t : {"1.5s", "1e3", "0x1p3", "1.2.3", "0.5x"}) EXPECT_FALSE(to_decimal(t)) << t;
  EXPECT_EQ(parse_u64("3x", "dropped.orphan").error().message, "dropped.orphan: not an unsigned integer: \"3x\"");
}

TEST(ParseNumber, WhitespaceIsNotPartOfANumber) {
  for (const char* t : {" 1", "1 ", "\t1", "1\n", "1\r", " "}) {
    EXPECT_FALSE(to_u64(t)) << t;
    EXPECT_FALSE(to_i64(t)) << t;
    EXPECT_FALSE(to_decimal(t)) << t;
  }
}

TEST(ParseNumber, AnEmbeddedNulIsNotTheEndOfTheText) {
  EXPECT_FALSE(to_u64(std::string_view("12\0" "3", 4)));
}

TEST(ParseNumber, ValidDecimals) {
  EXPECT_EQ(to_decimal("2"), 2.0);
  EXPECT_EQ(to_decimal("0.25"), 0.25);
  EXPECT_EQ(to_decimal(".5"), 0.5);
  EXPECT_EQ(to_decimal("5."), 5.0);
  EXPECT_EQ(to_decimal("-1.5"), -1.5);
  EXPECT_FALSE(to_decimal("+1.5"));
  EXPECT_FALSE(to_decimal("."));
}

TEST(ParseNumber, ADecimalIsFinite) {
  for (const char* t : {"inf", "-inf", "infinity", "nan", "NAN", "-nan"}) EXPECT_FALSE(to_decimal(t)) << t;
}

TEST(ParseNumber, TheErrorNamesWhatAndQuotesTheTextCut) {
  const std::string long_text(100, 'z');
  auto r = parse_u64(long_text, "query_tokens");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
  EXPECT_EQ(r.error().message, "query_tokens: not an unsigned integer: \"" + std::string(32, 'z') + "\"");
}

TEST(ParseNumber, AnEnvironmentVariablesErrorNamesItAndItsValue) {
  const Error e = bad_env("LISTEN_FDNAMES", "a:b", "2 names for LISTEN_FDS=1");
  EXPECT_EQ(e.code, Errc::kInvalidArgument);
  EXPECT_EQ(e.message, "LISTEN_FDNAMES=a:b: 2 names for LISTEN_FDS=1");
}

TEST(ParseNumber, AnEnvironmentIntegerWithinItsRange) {
  auto r = parse_env_int<int>("LISTEN_FDS", "2", 0, 10, "not a descriptor count");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, 2);
  EXPECT_EQ(*parse_env_int<int>("LISTEN_FDS", "0", 0, 10, "not a descriptor count"), 0);
  EXPECT_EQ(*parse_env_int<int>("LISTEN_FDS", "10", 0, 10, "not a descriptor count"), 10);
  EXPECT_EQ(*parse_env_int<int64_t>("LISTEN_PID", "9223372036854775807", 1, INT64_MAX, "not a process id"), INT64_MAX);
}

TEST(ParseNumber, AnEnvironmentIntegerOutOfRangeOrNotANumberNamesTheVariable) {
  for (const char* v : {"x", "", "-1", "11", "+2", " 2", "2 ", "2x", "2147483648", "99999999999999999999"}) {
    auto r = parse_env_int<int>("LISTEN_FDS", v, 0, 10, "not a descriptor count");
    ASSERT_FALSE(r.ok()) << v;
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
    EXPECT_EQ(r.error().message, std::string("LISTEN_FDS=") + v + ": not a descriptor count");
  }
}

}  // namespace
}  // namespace fr
