// POST /v1/chat/completions of the tiny engine, driven in-process: the template, vLLM's request fields
// add_generation_prompt and continue_final_message, the stream's chunks, and the equality with
// /v1/completions for the rendered text that the front's chat continuation relies on.
#include "tinyengine/chat.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "engine_process.h"
#include "tinyengine/server.h"

namespace fr::te {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

class Chat : public ::testing::Test {
 protected:
  void SetUp() override { start(test::tiny_checkpoint()); }
  void start(const std::string& checkpoint) {
    ServeOptions o;
    o.model = checkpoint;
    o.served_model_name = "tiny";
    m_server = std::make_unique<EngineServer>(o);
    auto m = load_model(o.model, o.load);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    m_server->set_ready(std::make_unique<LoadedModel>(std::move(*m)), 0, 0);
  }
  std::string error_of(const json& body) {
    auto [st, j] = m_server->chat(body.dump());
    EXPECT_EQ(st, 400) << body.dump();
    return j["error"]["message"].get<std::string>();
  }
  // The events' data, parsed keeping the field order; [DONE] counted apart.
  std::vector<ojson> chunks_of(const json& body, int* done = nullptr) {
    auto s = m_server->stream_chat(body.dump());
    EXPECT_TRUE(s.ok()) << s.error().to_string();
    std::vector<ojson> out;
    if (!s.ok()) return out;
    for (const auto& ev : s->events) {
      EXPECT_TRUE(ev.starts_with("data: ") && ev.ends_with("\n\n")) << ev;
      const std::string data = ev.substr(6, ev.size() - 8);
      if (data == "[DONE]") {
        if (done) ++*done;
        continue;
      }
      out.push_back(ojson::parse(data));
    }
    return out;
  }
  std::unique_ptr<EngineServer> m_server;
};

json msgs(std::initializer_list<std::pair<const char*, const char*>> m) {
  json a = json::array();
  for (auto [role, content] : m) a.push_back({{"role", role}, {"content", content}});
  return a;
}

TEST(ChatTemplate, RendersEachMessageThenTheGenerationPrompt) {
  auto p = render_chat({{"messages", msgs({{"system", "be brief"}, {"user", "hi"}})}});
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  EXPECT_EQ(p->text, "system: be brief\nuser: hi\nassistant: ");
  EXPECT_EQ(p->role, "assistant");
  auto no_gen = render_chat({{"messages", msgs({{"user", "hi"}})}, {"add_generation_prompt", false}});
  ASSERT_TRUE(no_gen.ok());
  EXPECT_EQ(no_gen->text, "user: hi\n");
  EXPECT_EQ(no_gen->role, "user") << "vLLM: the last message's role without a generation prompt";
  auto cont = render_chat({{"messages", msgs({{"user", "hi"}, {"assistant", "Hel"}})},
                           {"add_generation_prompt", false},
                           {"continue_final_message", true}});
  ASSERT_TRUE(cont.ok()) << cont.error().to_string();
  EXPECT_EQ(cont->text, "user: hi\nassistant: Hel") << "the final message continued: no closing";
  EXPECT_EQ(cont->role, "assistant");
  auto parts = render_chat({{"messages", json::array({{{"role", "user"},
                                                       {"content", json::array({{{"type", "text"}, {"text", "a"}},
                                                                                {{"type", "text"}, {"text", "b"}}})}}})}});
  ASSERT_TRUE(parts.ok());
  EXPECT_EQ(parts->text, "user: a\nb\nassistant: ");
  auto null_content = render_chat({{"messages", json::array({{{"role", "assistant"}, {"content", nullptr}}})}});
  ASSERT_TRUE(null_content.ok());
  EXPECT_EQ(null_content->text, "assistant: \nassistant: ");
}

TEST(ChatTemplate, BadMessagesAndFlagsNameTheField) {
  auto err = [](const json& r) {
    auto p = render_chat(r);
    EXPECT_FALSE(p.ok()) << r.dump();
    return p.ok() ? std::string() : p.error().message;
  };
  EXPECT_NE(err({{"messages", msgs({{"assistant", "x"}})}, {"continue_final_message", true}})
                .find("Cannot set both `continue_final_message` and `add_generation_prompt` to True."),
            std::string::npos);
  EXPECT_NE(err({{"messages", msgs({{"user", "x"}})}, {"continue_final_message", true}, {"add_generation_prompt", false}})
                .find("must be the assistant's"),
            std::string::npos);
  EXPECT_NE(err(json::object()).find("'messages' is required"), std::string::npos);
  EXPECT_NE(err({{"messages", json::array()}}).find("non-empty"), std::string::npos);
  EXPECT_NE(err({{"messages", json::array({{{"content", "x"}}})}}).find("'messages[0]'"), std::string::npos);
  EXPECT_NE(err({{"messages", json::array({{{"role", "user"}, {"content", 3}}})}}).find("'messages[0].content'"),
            std::string::npos);
  EXPECT_NE(err({{"messages", msgs({{"user", "x"}})}, {"add_generation_prompt", "yes"}}).find("add_generation_prompt"),
            std::string::npos);
}

TEST_F(Chat, AnswerIsTheCompletionOfTheRenderedPrompt) {
  const json messages = msgs({{"user", "hello there"}});
  auto [st, j] = m_server->chat(json{{"model", "tiny"}, {"messages", messages}, {"max_completion_tokens", 9}}.dump());
  ASSERT_EQ(st, 200) << j.dump();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_TRUE(j["id"].get<std::string>().starts_with("chatcmpl-"));
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  auto [cst, c] = m_server->complete(json{{"prompt", "user: hello there\nassistant: "}, {"max_tokens", 9}}.dump());
  ASSERT_EQ(cst, 200);
  EXPECT_EQ(j["choices"][0]["message"]["content"], c["choices"][0]["text"]);
  EXPECT_EQ(j["choices"][0]["finish_reason"], c["choices"][0]["finish_reason"]);
  EXPECT_EQ(j["usage"], c["usage"]);
  EXPECT_NE(error_of({{"messages", messages}, {"n", 2}}).find("'n'"), std::string::npos);
  EXPECT_NE(error_of({{"messages", messages}, {"logprobs", true}}).find("logprobs"), std::string::npos);
  EXPECT_NE(error_of({{"messages", messages}, {"tools", json::array()}}).find("tools"), std::string::npos);
  EXPECT_NE(error_of({{"messages", messages}, {"max_completion_tokens", -1}}).find("max_completion_tokens"),
            std::string::npos);
  EXPECT_NE(error_of({{"messages", messages}, {"stream", true}}).find("stream"), std::string::npos);
  EXPECT_EQ(m_server->chat(json{{"model", "other"}, {"messages", messages}}.dump()).first, 404);
}

TEST_F(Chat, StreamIsVllmsChatChunks) {
  const json body = {{"messages", msgs({{"user", "hi"}})},
                     {"max_tokens", 6},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  int done = 0;
  auto chunks = chunks_of(body, &done);
  EXPECT_EQ(done, 1);
  ASSERT_EQ(chunks.size(), 8u) << "the role chunk, one per token, usage";
  const std::vector<std::string> head = {"id", "object", "created", "model", "choices"};
  for (const auto& c : chunks) {
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["id"], chunks[0]["id"]);
    std::vector<std::string> keys;
    for (auto it = c.begin(); it != c.end(); ++it) keys.push_back(it.key());
    EXPECT_EQ(std::vector<std::string>(keys.begin(), keys.begin() + 5), head) << c.dump();
  }
  EXPECT_EQ(chunks[0]["choices"][0]["delta"], (ojson{{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(chunks[0]["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(chunks[0]["prompt_token_ids"].is_null());
  std::string content;
  for (size_t i = 1; i <= 6; ++i) {
    const auto& ch = chunks[i]["choices"][0];
    EXPECT_FALSE(ch["delta"].contains("role"));
    content += ch["delta"]["content"].get<std::string>();
    EXPECT_EQ(ch["finish_reason"].is_null(), i < 6) << ch.dump();
  }
  EXPECT_EQ(chunks[6]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(chunks[7]["choices"].empty());
  EXPECT_EQ(chunks[7]["usage"]["prompt_tokens"], 20);  // "user: hi\nassistant: "
  EXPECT_EQ(chunks[7]["usage"]["completion_tokens"], 6);
  auto [st, whole] = m_server->chat(json{{"messages", msgs({{"user", "hi"}})}, {"max_tokens", 6}}.dump());
  ASSERT_EQ(st, 200);
  // As a client reads both: bytes that are not UTF-8 become U+FFFD in JSON, in the answer as in the stream.
  const auto read = json::parse(whole.dump(-1, ' ', false, json::error_handler_t::replace));
  EXPECT_EQ(content, read["choices"][0]["message"]["content"].get<std::string>());
  auto no_usage = chunks_of({{"messages", msgs({{"user", "hi"}})}, {"max_tokens", 2}, {"stream", true}});
  EXPECT_EQ(no_usage.size(), 3u);
}

// What the front's continuation of a chat stream relies on: the messages with the content sent so far as
// a final assistant message, continued, give the rest of the uninterrupted content.
TEST_F(Chat, ContinuedFinalMessageGivesTheRestOfTheContent) {
  // A checkpoint whose greedy answers are printable ASCII (gen --printable): the random test weights'
  // answers are mostly bytes that are not UTF-8, which a client reads as U+FFFD and could not send back.
  start(test::printable_checkpoint());
  const json m = msgs({{"system", "s"}, {"user", "tell me"}});
  auto [st, whole] = m_server->chat(json{{"messages", m}, {"max_tokens", 12}}.dump());
  ASSERT_EQ(st, 200);
  const std::string all = whole["choices"][0]["message"]["content"];
  ASSERT_EQ(all.size(), 12u);
  EXPECT_TRUE(std::all_of(all.begin(), all.end(), [](char c) { return c >= 0x20 && c < 0x7f; })) << all;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    json cont = m;
    cont.push_back({{"role", "assistant"}, {"content", all.substr(0, 5)}});
    auto [cst, rest] = m_server->chat(json{{"messages", cont},
                                           {key, 7},
                                           {"add_generation_prompt", false},
                                           {"continue_final_message", true}}
                                          .dump());
    ASSERT_EQ(cst, 200) << rest.dump();
    EXPECT_EQ(rest["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(all.substr(0, 5) + rest["choices"][0]["message"]["content"].get<std::string>(), all) << key;
    EXPECT_EQ(rest["usage"]["prompt_tokens"].get<size_t>(),
              std::string("system: s\nuser: tell me\nassistant: " + all.substr(0, 5)).size())
        << "one token per byte";
  }
}

}  // namespace
}  // namespace fr::te
