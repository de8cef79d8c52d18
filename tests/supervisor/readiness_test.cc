// The verdict on the engine's answer to the readiness request (judge_completion), fed directly: the
// same function fuzz_readiness feeds with hostile bodies.
#include "supervisor/readiness.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace fr::supervisor {
namespace {

TEST(ReadinessJudge, TheTextMustMatchTheOracle) {
  ReadinessConfig rc;
  rc.expect_text = " Paris";
  EXPECT_TRUE(judge_completion(200, R"({"choices":[{"text":" Paris"}]})", rc).ok);
  auto r = judge_completion(200, R"({"choices":[{"text":" Lyon"}]})", rc);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.detail, R"(the readiness answer " Lyon" differs from the oracle " Paris")");
}

TEST(ReadinessJudge, MalformedAnswersSayWhy) {
  ReadinessConfig rc;
  for (const char* body : {"", "[]", "{\"choices\":{}}", "{\"choices\":[]}", "{\"choices\":[1]}", "{\"choices\":[{\"text\":3}]}"})
    EXPECT_EQ(judge_completion(200, body, rc).detail, "POST /v1/completions: the answer has no choices[0].text") << body;
}

// An error body is quoted and escaped: one line of valid UTF-8, whatever bytes the engine sent.
TEST(ReadinessJudge, AnErrorBodyBecomesOneLineOfValidUtf8) {
  ReadinessConfig rc;
  auto r = judge_completion(500, std::string("boom\n\xff\xfe line two", 16), rc);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.detail.find('\n'), std::string::npos) << r.detail;
  EXPECT_NO_THROW((void)nlohmann::json(r.detail).dump());
  EXPECT_EQ(r.detail.rfind("POST /v1/completions: HTTP 500 \"boom\\n", 0), 0u) << r.detail;
}

}  // namespace
}  // namespace fr::supervisor
