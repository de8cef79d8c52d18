// parse_json_bounded (docs/reliability.md, "Limits on what a peer sends"): depth and value counts are
// refused before nlohmann parses, whatever the strings hold.
#include "common/bounded_json.h"

#include <gtest/gtest.h>

#include <string>

namespace fr {
namespace {

std::string nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(BoundedJson, NestingUpToTheLimitParsesOneDeeperIsRefusedByName) {
  const JsonLimits lim{32, 1000, "frame"};
  auto ok = parse_json_bounded(nested(32), lim);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  auto deep = parse_json_bounded(nested(33), lim);
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.error().code, Errc::kProtocol);
  EXPECT_EQ(deep.error().message, "frame nests deeper than 32 levels");
}

// The frame that killed the daemons: an id nested two million deep inside an otherwise valid request.
TEST(BoundedJson, TwoMillionLevelsAreRefusedWithoutParsing) {
  const std::string text = "{\"op\":\"status\",\"id\":" + nested(2'000'000) + "}";
  auto r = parse_json_bounded(text, kFrameJsonLimits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "frame nests deeper than 32 levels");
}

TEST(BoundedJson, ValuesPastTheLimitAreRefusedByName) {
  const JsonLimits lim{32, 5, "message"};
  // {"a":[1,2]} is five values: the object, its key, the array, two numbers.
  ASSERT_TRUE(parse_json_bounded("{\"a\":[1,2]}", lim).ok());
  auto r = parse_json_bounded("{\"a\":[1,2,3]}", lim);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "message holds more than 5 values");
  // Literals and numbers count one each, however long.
  ASSERT_TRUE(parse_json_bounded("[true,-12.5e3,null,false]", lim).ok());
  EXPECT_FALSE(parse_json_bounded("[true,-12.5e3,null,false,0]", lim).ok());
}

TEST(BoundedJson, BracketsAndQuotesInsideStringsDoNotCount) {
  const JsonLimits lim{2, 4, "message"};
  auto r = parse_json_bounded(R"({"k":"[[[[{{{{ \"[[[ \\"})", lim);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)["k"], "[[[[{{{{ \"[[[ \\");
  // After an escaped backslash the quote ends the string: what follows is structure again.
  EXPECT_FALSE(parse_json_bounded(R"(["\\",[[]]])", lim).ok());
}

TEST(BoundedJson, TextThatIsNotJsonIsAProtocolError) {
  auto r = parse_json_bounded("{\"a\":", kSmallJsonLimits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kProtocol);
  EXPECT_EQ(r.error().message, "message is not valid JSON");
  EXPECT_TRUE(parse_json_or_discarded(nested(40)).is_discarded());
  EXPECT_TRUE(parse_json_or_discarded("nope").is_discarded());
  EXPECT_EQ(parse_json_or_discarded("{\"a\":1}")["a"], 1);
}

}  // namespace
}  // namespace fr
