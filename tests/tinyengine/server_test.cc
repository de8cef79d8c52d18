// Request validation and response shape of POST /v1/completions, driven in-process.
#include "tinyengine/server.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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

// The data of each event of a streamed answer, parsed keeping the field order.
std::vector<nlohmann::ordered_json> stream_data(const StreamedCompletion& s, std::string* last = nullptr) {
  std::vector<nlohmann::ordered_json> out;
  for (const auto& ev : s.events) {
    EXPECT_TRUE(ev.starts_with("data: ") && ev.ends_with("\n\n")) << ev;
    const std::string data = ev.substr(6, ev.size() - 8);
    if (data == "[DONE]") {
      if (last) *last = data;
      continue;
    }
    out.push_back(nlohmann::ordered_json::parse(data));
  }
  return out;
}

std::vector<std::string> keys_of(const nlohmann::ordered_json& j) {
  std::vector<std::string> k;
  for (auto it = j.begin(); it != j.end(); ++it) k.push_back(it.key());
  return k;
}

TEST_F(Completions, StreamIsVllmsChunksAndSaysWhatTheAnswerSays) {
  auto [st, whole] = call({{"prompt", "Hello"}, {"max_tokens", 7}});
  ASSERT_EQ(st, 200);
  auto s = m_server->stream_completion(
      json{{"prompt", "Hello"}, {"max_tokens", 7}, {"stream", true}, {"stream_options", json::object()}}.dump());
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  std::string done;
  auto chunks = stream_data(*s, &done);
  EXPECT_EQ(done, "[DONE]");
  EXPECT_EQ(s->events.back(), "data: [DONE]\n\n");
  ASSERT_EQ(chunks.size(), 8u) << "one chunk per token, then usage (stream_options given: include_usage)";
  EXPECT_EQ(s->token_events, 7u);
  std::string text;
  for (size_t i = 0; i < 7; ++i) {
    const auto& c = chunks[i];
    EXPECT_EQ(keys_of(c), (std::vector<std::string>{"id", "object", "created", "model", "choices", "usage"}));
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_EQ(c["id"], chunks[0]["id"]);
    EXPECT_TRUE(c["usage"].is_null());
    const auto& ch = c["choices"][0];
    EXPECT_EQ(keys_of(ch), (std::vector<std::string>{"index", "text", "logprobs", "finish_reason", "stop_reason",
                                                     "prompt_token_ids", "token_ids"}));
    EXPECT_TRUE(ch["token_ids"].is_null()) << "token_ids only with return_token_ids";
    if (i == 0) EXPECT_EQ(ch["prompt_token_ids"], json({72, 101, 108, 108, 111}));
    else EXPECT_TRUE(ch["prompt_token_ids"].is_null());
    EXPECT_EQ(ch["finish_reason"].is_null(), i < 6);
    text += ch["text"].get<std::string>();
  }
  EXPECT_EQ(chunks[6]["choices"][0]["finish_reason"], whole["choices"][0]["finish_reason"]);
  // As a client reads both: bytes that are no UTF-8 become U+FFFD in JSON, in the answer as in the stream.
  const auto as_sent = [](const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); };
  EXPECT_EQ(as_sent(text), as_sent(whole["choices"][0]["text"]));
  const auto& u = chunks[7];
  EXPECT_EQ(keys_of(u), (std::vector<std::string>{"id", "object", "created", "model", "choices", "usage"}));
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(keys_of(u["usage"]), (std::vector<std::string>{"prompt_tokens", "total_tokens", "completion_tokens"}));
  EXPECT_EQ(u["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(u["usage"]["completion_tokens"], 7);
}

TEST_F(Completions, StreamReturnTokenIdsAndContinuousUsage) {
  auto [st, whole] = call({{"prompt", {1, 2, 3}}, {"max_tokens", 5}});
  ASSERT_EQ(st, 200);
  auto s = m_server->stream_completion(json{{"prompt", {1, 2, 3}},
                                            {"max_tokens", 5},
                                            {"stream", true},
                                            {"return_token_ids", true},
                                            {"stream_options", {{"include_usage", true}, {"continuous_usage_stats", true}}}}
                                           .dump());
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  auto chunks = stream_data(*s);
  ASSERT_EQ(chunks.size(), 6u);
  json ids = json::array();
  for (size_t i = 0; i < 5; ++i) {
    ASSERT_EQ(chunks[i]["choices"][0]["token_ids"].size(), 1u);
    ids.push_back(chunks[i]["choices"][0]["token_ids"][0].get<int>());
    EXPECT_EQ(chunks[i]["usage"]["completion_tokens"], i + 1);
    EXPECT_EQ(chunks[i]["usage"]["prompt_tokens"], 3);
  }
  EXPECT_EQ(ids, whole["choices"][0]["token_ids"]);
  EXPECT_EQ(chunks[0]["choices"][0]["prompt_token_ids"], json({1, 2, 3}));
}

TEST_F(Completions, StreamWithoutUsageEndsWithDone) {
  auto s = m_server->stream_completion(json{{"prompt", "ab"}, {"max_tokens", 2}, {"stream", true}}.dump());
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->events.size(), 3u);
  EXPECT_EQ(s->events[2], "data: [DONE]\n\n");
  auto bad = m_server->stream_completion(json{{"prompt", "ab"}, {"stream", true}, {"stream_options", 3}}.dump());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("stream_options"), std::string::npos);
}

TEST(StreamText, AHalfCharacterWaitsForItsRest) {
  EXPECT_EQ(utf8_sendable("ab"), 2u);
  EXPECT_EQ(utf8_sendable("a\xC3"), 1u);
  EXPECT_EQ(utf8_sendable("a\xC3\xA9"), 3u);
  EXPECT_EQ(utf8_sendable("\xE2\x82"), 0u);
  EXPECT_EQ(utf8_sendable("\xE2\x82\xAC"), 3u);
  EXPECT_EQ(utf8_sendable("\xF0\x9F\x98"), 0u);
  EXPECT_EQ(utf8_sendable("\xFF"), 1u) << "a byte no character starts with goes as it is";
  EXPECT_EQ(utf8_sendable("\x80\x80\x80\x80"), 4u);
  EXPECT_EQ(utf8_sendable(""), 0u);
}

TEST_F(Completions, UnknownModelIs404) {
  auto [st, j] = call({{"model", "other"}, {"prompt", "a"}});
  EXPECT_EQ(st, 404);
  EXPECT_EQ(j["error"]["code"], 404);
}

}  // namespace
}  // namespace fr::te
