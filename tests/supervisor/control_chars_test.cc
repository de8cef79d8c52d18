// Raw control characters in engine flags are refused where flags enter (a control request, the config
// file) and escaped where untrusted text is logged (common/control_chars.h, supervisor/flags.h).
#include <gtest/gtest.h>

#include "common/control_chars.h"
#include "supervisor/config.h"
#include "supervisor/control_request.h"
#include "supervisor/flags.h"

namespace fr::supervisor {
namespace {

using nlohmann::json;
using Words = std::vector<std::string>;

TEST(ControlChars, EscapedForALogLine) {
  EXPECT_EQ(escape_control_chars("plain text, ünïcode \\n"), "plain text, ünïcode \\n");
  EXPECT_EQ(escape_control_chars(std::string("a\nb\rc\td\0e\x1b[31m\x7f", 15)), "a\\nb\\rc\\td\\0e\\x1b[31m\\x7f");
  EXPECT_EQ(find_control_char("abc"), std::nullopt);
  EXPECT_EQ(find_control_char("ab\x01"), 2u);
}

TEST(ControlChars, AFlagWordWithOneIsRefusedByPosition) {
  EXPECT_TRUE(check_flag_words({"--x", "1", "--name=ünïcode"}, "flags").ok());
  auto nul = check_flag_words({"--x", std::string("1\0rm", 4)}, "flags");
  ASSERT_FALSE(nul.ok());
  EXPECT_EQ(nul.error().code, Errc::kInvalidArgument);
  EXPECT_EQ(nul.error().message.substr(0, 62), "flags[1] \"1\\0rm\": holds a control character (\\0 at byte 1); fl");
  auto nl = check_flag_words({"--served-model-name", "t\n[info] READY"}, "engine.flags");
  ASSERT_FALSE(nl.ok());
  EXPECT_NE(nl.error().message.find("engine.flags[1] \"t\\n[info] READY\": holds a control character (\\n at byte 1)"),
            std::string::npos)
      << nl.error().message;
  // A secret's value is not repeated in the error.
  auto secret = check_flag_words({"--api-key=s3cr\net"}, "flags");
  ASSERT_FALSE(secret.ok());
  EXPECT_EQ(secret.error().message.find("s3cr"), std::string::npos) << secret.error().message;
}

TEST(ControlChars, ARequestWithOneIsRefusedInEitherForm) {
  auto arr = parse_control_request(json{{"op", "reload"}, {"flags", json::array({"--a", std::string("x\0y", 3)})}});
  ASSERT_FALSE(arr.ok());
  EXPECT_NE(arr.error().message.find("flags[1] \"x\\0y\""), std::string::npos) << arr.error().message;
  // In the string form a bare newline separates words, as in sh; a quoted one is part of a word.
  auto bare = parse_control_request(json{{"op", "reload"}, {"flags", "--a 1\n--b 2"}});
  ASSERT_TRUE(bare.ok()) << bare.error().message;
  EXPECT_EQ(bare->flags->words(), (Words{"--a", "1", "--b", "2"}));
  auto quoted = parse_control_request(json{{"op", "reload"}, {"flags", "--a 'x\ny'"}});
  ASSERT_FALSE(quoted.ok());
  EXPECT_NE(quoted.error().message.find("flags[1] \"x\\ny\": holds a control character (\\n at byte 1)"), std::string::npos)
      << quoted.error().message;
  auto esc = parse_control_request(json{{"op", "check"}, {"flags", std::string("--a \x1b[2J")}});
  EXPECT_FALSE(esc.ok());
}

TEST(ControlChars, InTheConfigsFlagsTheyAreAnErrorNamingFileAndLine) {
  auto c = parse_config("[engine]\ncommand = [\"x\"]\nflags = [\"--a\",\n  \"b\\u0007\"]\n", "/etc/fastrestart/m.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("/etc/fastrestart/m.toml:3: engine.flags[1] \"b\\x07\": holds a control character"),
            std::string::npos)
      << c.error().message;
}

TEST(ControlChars, FlagsForALogLineAreRedactedAndEscaped) {
  EXPECT_EQ(words_for_log({"--api-key", "k", "--name", "a\nb"}), "--api-key <redacted> --name a\\nb");
}

}  // namespace
}  // namespace fr::supervisor
