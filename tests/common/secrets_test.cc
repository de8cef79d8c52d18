// The secrets rule (common/secrets.h): which flags are secret, every value of one, and the scrubbing of
// free text.
#include "common/secrets.h"

#include <gtest/gtest.h>

namespace fr {
namespace {

using Words = std::vector<std::string>;

TEST(Secrets, EverySpellingOfASecretFlagIsSecret) {
  for (const char* name : {"--api-key", "--api-keys", "--apikey", "--apikeys", "--api_key", "--API-KEY", "--hf-token",
                           "--hf_token", "--hftoken", "--auth-token", "--client-secret", "--client-secrets",
                           "--db-password", "--db-passwd", "--credentials", "--auth", "--authorization", "-api-key"})
    EXPECT_TRUE(is_secret_flag(name)) << name;
}

TEST(Secrets, LookalikesAreNotSecret) {
  for (const char* name : {"--tokenizer", "--max-tokens", "--max-num-batched-tokens", "--skip-tokenizer-init",
                           "--ssl-keyfile", "--author", "--port", "--model", "--", "-"})
    EXPECT_FALSE(is_secret_flag(name)) << name;
}

TEST(Secrets, TheConfigsNamesAreSecretHoweverSpelled) {
  EXPECT_FALSE(is_secret_flag("--custom-opt"));
  EXPECT_TRUE(is_secret_flag("--custom-opt", {"--custom-opt"}));
  EXPECT_TRUE(is_secret_flag("--custom_opt", {"custom-opt"}));
}

TEST(Secrets, EveryValueOfAMultiValueFlagIsRedacted) {
  EXPECT_EQ(redact_words({"serve", "m", "--api-key", "k1", "k2", "k3", "--port", "8000"}),
            (Words{"serve", "m", "--api-key", "<redacted>", "<redacted>", "<redacted>", "--port", "8000"}));
  EXPECT_EQ(secret_values({"--api-key", "k1", "k2", "--port", "8000"}), (Words{"k1", "k2"}));
}

TEST(Secrets, AValueBeginningWithADashIsStillAValue) {
  EXPECT_EQ(redact_words({"--api-key", "-sk-abc", "--port", "1"}), (Words{"--api-key", "<redacted>", "--port", "1"}));
  EXPECT_EQ(redact_words({"--api-key=-sk-abc", "--port", "1"}), (Words{"--api-key=<redacted>", "--port", "1"}));
  EXPECT_EQ(redact_words({"--api-key", "-5"}), (Words{"--api-key", "<redacted>"}));
  // A long flag right after the name is the next flag, not a value.
  EXPECT_EQ(redact_words({"--api-key", "--port", "1"}), (Words{"--api-key", "--port", "1"}));
}

TEST(Secrets, TheInlineFormTakesOneValue) {
  EXPECT_EQ(redact_words({"--hf-token=hf_abc", "model"}), (Words{"--hf-token=<redacted>", "model"}));
  EXPECT_EQ(secret_values({"--hf-token=hf_abc", "model"}), (Words{"hf_abc"}));
}

TEST(Secrets, ValuesCanBeMappedToDigests) {
  auto out = map_secret_values({"--api-key", "k1", "--x", "1", "--apikey=k2"}, [](std::string_view v) { return secret_digest(v); });
  EXPECT_EQ(out[1], secret_digest("k1"));
  EXPECT_EQ(out[4], "--apikey=" + secret_digest("k2"));
  EXPECT_TRUE(is_secret_digest(out[1]));
  EXPECT_NE(secret_digest("k1"), secret_digest("k2"));
  EXPECT_EQ(out[3], "1");
}

TEST(Secrets, TheScrubberRemovesEveryOccurrenceInFreeText) {
  SecretScrubber s;
  s.add(Words{"sk-abcdef", "hf_token_value"});
  EXPECT_EQ(s.scrub("key sk-abcdef and sk-abcdef, token hf_token_value."),
            "key <redacted> and <redacted>, token <redacted>.");
  // Short values are left to the rule: scrubbing them would rewrite ordinary text.
  s.add("abc");
  EXPECT_EQ(s.scrub("abc"), "abc");
}

TEST(Secrets, TheScrubberFindsAValueInsideAJsonDumpAndAJsonValue) {
  SecretScrubber s;
  s.add("pa\"ss\\word");
  const std::string dumped = nlohmann::json({{"x", "pa\"ss\\word"}}).dump();
  EXPECT_EQ(s.scrub(dumped).find("ss"), std::string::npos) << s.scrub(dumped);
  nlohmann::json j = {{"detail", "was pa\"ss\\word"}, {"list", {"pa\"ss\\word", 3}}};
  s.scrub(j);
  EXPECT_EQ(j["detail"], "was <redacted>");
  EXPECT_EQ(j["list"][0], "<redacted>");
  EXPECT_EQ(j["list"][1], 3);
}

TEST(Secrets, ALongerSecretHoldingAShorterOneIsReplacedWhole) {
  SecretScrubber s;
  s.add("secret-1");
  s.add("secret-1-and-more");
  EXPECT_EQ(s.scrub("x secret-1-and-more y"), "x <redacted> y");
}

}  // namespace
}  // namespace fr
