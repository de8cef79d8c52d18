// Request validation and response shape of POST /v1/completions, driven in-process.
#include "tinyengine/server.h"

#include <gtest/gtest.h>

#include "engine_process.h"

namespace fr::te {
namespace {

using nlohmann::json;

class Completions : public ::testing::Test {
 protected:
  void SetUp() override {
    ServeOptions o;
    o.model = test::tiny_checkpoint();
    o.served_model_name = "tiny";
    m_server = std::make_unique<EngineServer>(o);
    auto m = load_model(o.model, o.load);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    m_server->set_ready(std::make_unique<LoadedModel>(std::move(*m)), 0, 0);
  }
  std::pair<int, json> call(const json& body) { return m_server->complete(body.dump()); }
  std::string error_of(const json& body) {
    auto [st, j] = call(body);
    EXPECT_EQ(st, 400) << body.dump();
    return j["error"]["message"].get<std::string>();
  }
  std::unique_ptr<EngineServer> m_server;
};

TEST_F(Completions, AnswersInOpenAiShape) {
  auto [st, j] = call({{"model", "tiny"}, {"prompt", "Hello"}, {"max_tokens", 5}, {"logprobs", 2}, {"seed", 9}});
  ASSERT_EQ(st, 200) << j.dump();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  const auto& c = j["choices"][0];
  EXPECT_EQ(c["token_ids"].size(), 5u);
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(c["logprobs"]["token_logprobs"].size(), 5u);
  EXPECT_EQ(c["logprobs"]["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], 10);
}

TEST_F(Completions, TokenIdPromptEqualsStringPrompt) {
  auto a = call(test::completion_request("abc", 6)).second;
  auto b = call({{"prompt", {97, 98, 99}}, {"max_tokens", 6}, {"logprobs", 1}}).second;
  EXPECT_EQ(test::answer_of(a), test::answer_of(b));
}

TEST_F(Completions, BatchPromptsGiveOneChoiceEach) {
  auto [st, j] = call({{"prompt", {"abc", "xyz"}}, {"max_tokens", 2}});
  ASSERT_EQ(st, 200);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
}

TEST_F(Completions, BadRequestsAre400WithAMessage) {
  EXPECT_EQ(m_server->complete("{not json").first, 400);
  EXPECT_EQ(m_server->complete("[1,2]").first, 400);
  EXPECT_NE(error_of({{"max_tokens", 1}}).find("'prompt' is required"), std::string::npos);
  EXPECT_NE(error_of({{"prompt", ""}}).find("empty"), std::string::npos);
  EXPECT_NE(error_of({{"prompt", {1, 999}}}).find("out of range"), std::string::npos);
  EXPECT_NE(error_of({{"prompt", 5}}).find("'prompt'"), std::string::npos);
  EXPECT_NE(error_of({{"prompt", "a"}, {"max_tokens", -1}}).find("max_tokens"), std::string::npos);
  EXPECT_NE(error_of({{"prompt", "a"}, {"max_tokens", "3"}}).find("max_tokens"), std::string::npos);
  EXPECT_NE(error_of({{"prompt", "a"}, {"max_tokens", 256}}).find("maximum context length is 256"),
            std::string::npos);
  EXPECT_NE(error_of({{"prompt", "a"}, {"logprobs", 21}}).find("logprobs"), std::string::npos);
  EXPECT_NE(error_of({{"prompt", "a"}, {"temperature", -1}}).find("temperature"), std::string::npos);
  EXPECT_NE(error_of({{"prompt", "a"}, {"stream", true}}).find("stream"), std::string::npos);
  EXPECT_NE(error_of({{"prompt", "a"}, {"n", 2}}).find("'n'"), std::string::npos);
}

TEST_F(Completions, UnknownModelIs404) {
  auto [st, j] = call({{"model", "other"}, {"prompt", "a"}});
  EXPECT_EQ(st, 404);
  EXPECT_EQ(j["error"]["code"], 404);
}

}  // namespace
}  // namespace fr::te
