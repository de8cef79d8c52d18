// StreamSplice on its own: which streams can be continued, what the engine is sent, and how a
// continuation's events are rewritten into the client's stream.
#include "front/splice.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace fr::front {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

Request stream_request(json body, std::string url = "/v1/completions") {
  Request r;
  r.method = "POST";
  r.url = std::move(url);
  body["stream"] = true;
  r.body = body.dump();
  r.stream = true;
  return r;
}

std::string chunk(const std::string& id, int created, const std::string& text, std::vector<int> ids,
                  std::optional<std::vector<int>> prompt_ids = std::nullopt, const char* finish = nullptr) {
  ojson c = {{"index", 0},
             {"text", text},
             {"logprobs", nullptr},
             {"finish_reason", finish ? ojson(finish) : ojson(nullptr)},
             {"stop_reason", nullptr},
             {"prompt_token_ids", prompt_ids ? ojson(*prompt_ids) : ojson(nullptr)},
             {"token_ids", ids}};
  ojson j = {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", "m"},
             {"choices", ojson::array({c})}, {"usage", nullptr}};
  return "data: " + j.dump() + "\n\n";
}

std::string usage(const std::string& id, int created, int prompt, int completion) {
  ojson j = {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", "m"},
             {"choices", ojson::array()},
             {"usage", {{"prompt_tokens", prompt}, {"total_tokens", prompt + completion}, {"completion_tokens", completion}}}};
  return "data: " + j.dump() + "\n\n";
}

TEST(FrontSplice, WhatIsNotContinuedSaysWhy) {
  struct Case {
    json body;
    const char* reason;
  } cases[] = {
      {{{"prompt", "a"}, {"max_tokens", 4}, {"n", 2}}, "n"},
      {{{"prompt", "a"}, {"max_tokens", 4}, {"best_of", 3}}, "n"},
      {{{"prompt", "a"}, {"max_tokens", 4}, {"echo", true}}, "echo"},
      {{{"prompt", "a"}, {"max_tokens", 4}, {"logprobs", 0}}, "logprobs"},
      {{{"prompt", "a"}, {"max_tokens", 4}, {"guided_json", {{"type", "object"}}}}, "guided"},
      {{{"prompt", "a"}, {"max_tokens", 4}, {"response_format", {{"type", "json_object"}}}}, "guided"},
      {{{"prompt", "a"}, {"max_tokens", 4}, {"tools", json::array({1})}}, "tools"},
      {{{"prompt", "a"}, {"max_tokens", 4}, {"stop", {"x"}}}, "stop"},
      {{{"prompt", "a"}, {"max_tokens", 4}, {"presence_penalty", 0.5}}, "penalties"},
      {{{"prompt", "a"}}, "max_tokens"},
      {{{"prompt", {"a", "b"}}, {"max_tokens", 4}}, "prompt"},
  };
  for (const auto& c : cases) {
    StreamSplice s(stream_request(c.body), 1 << 20);
    EXPECT_FALSE(s.continuable()) << c.body.dump();
    EXPECT_EQ(s.reason(), c.reason) << c.body.dump();
    EXPECT_FALSE(s.why().empty());
    EXPECT_EQ(s.forward_body(), stream_request(c.body).body) << "sent as the client wrote it";
  }
  StreamSplice other(stream_request({{"input", "a"}, {"max_tokens", 4}}, "/v1/embeddings"), 1 << 20);
  EXPECT_EQ(other.reason(), "endpoint");
  StreamSplice ok(stream_request({{"prompt", "a"}, {"max_tokens", 4}, {"stop", json::array()}, {"temperature", 0}}), 1 << 20);
  EXPECT_TRUE(ok.continuable()) << ok.why();
}

TEST(FrontSplice, ContinuesWithTokenIdsAndSplicesOneStream) {
  StreamSplice s(stream_request({{"prompt", "hi"}, {"max_tokens", 5}, {"stream_options", {{"include_usage", true}}}}), 1 << 20);
  ASSERT_TRUE(s.continuable());
  EXPECT_EQ(json::parse(s.forward_body())["return_token_ids"], true);
  // The first engine: the client gets its chunks without token_ids (it did not ask for them).
  auto out = s.on_event(chunk("A", 100, "x", {120}, std::vector<int>{104, 105}));
  auto j = json::parse(out.substr(6));
  EXPECT_TRUE(j["choices"][0]["token_ids"].is_null());
  EXPECT_EQ(j["choices"][0]["prompt_token_ids"], json({104, 105}));
  EXPECT_EQ(j["id"], "A");
  s.on_event(chunk("A", 100, "y", {121}));
  EXPECT_EQ(s.resume(), StreamSplice::Next::kResend);
  auto next = json::parse(s.body());
  EXPECT_EQ(next["prompt"], json({104, 105, 120, 121}));
  EXPECT_EQ(next["max_tokens"], 3);
  EXPECT_EQ(next["return_token_ids"], true);
  EXPECT_EQ(next["stream_options"]["include_usage"], true);
  // The next engine: its id, created and longer prompt never reach the client; usage counts once.
  out = s.on_event(chunk("B", 200, "z", {122}, std::vector<int>{104, 105, 120, 121}));
  j = json::parse(out.substr(6));
  EXPECT_EQ(j["id"], "A");
  EXPECT_EQ(j["created"], 100);
  EXPECT_TRUE(j["choices"][0]["prompt_token_ids"].is_null());
  EXPECT_TRUE(j["choices"][0]["token_ids"].is_null());
  out = s.on_event(usage("B", 200, 4, 3));
  j = json::parse(out.substr(6));
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
  EXPECT_EQ(j["id"], "A");
  EXPECT_EQ(s.on_event("data: [DONE]\n\n"), "data: [DONE]\n\n");
  EXPECT_EQ(s.resume(), StreamSplice::Next::kFinish) << "the client has the whole stream";
}

TEST(FrontSplice, ClientsOwnTokenIdsStayAndTextFallback) {
  StreamSplice s(stream_request({{"prompt", "hi"}, {"max_tokens", 5}, {"return_token_ids", true}}), 1 << 20);
  ASSERT_TRUE(s.continuable());
  const std::string ev = chunk("A", 1, "x", {120}, std::vector<int>{104, 105});
  EXPECT_EQ(s.on_event(ev), ev) << "nothing to take out: passed unchanged";
  // An engine without token ids: continued as text.
  StreamSplice t(stream_request({{"prompt", "hi"}, {"max_tokens", 5}}), 1 << 20);
  ojson c = ojson::parse(chunk("A", 1, "xy", {}).substr(6));
  c["choices"][0].erase("token_ids");
  t.on_event("data: " + c.dump() + "\n\n");
  ASSERT_EQ(t.resume(), StreamSplice::Next::kResend);
  auto next = json::parse(t.body());
  EXPECT_EQ(next["prompt"], "hixy");
  EXPECT_EQ(next["max_tokens"], 4) << "a chunk without ids counts as one token";
}

// The count of generated ids at the end of a continuation's prompt (kGeneratedTokensHeader): none on the
// first attempt, every id sent over all attempts on each continuation by token ids, none on a text one
// (the next engine tokenizes the joined text, so where the generated tokens start is not known).
TEST(FrontSplice, GeneratedTokensCountsTheIdsAppendedToThePrompt) {
  StreamSplice s(stream_request({{"prompt", {7, 8, 9}}, {"max_tokens", 10}}), 1 << 20);
  EXPECT_EQ(s.generated_tokens(), 0u) << "the first attempt";
  s.on_event(chunk("A", 1, "a", {97}, std::vector<int>{7, 8, 9}));
  s.on_event(chunk("A", 1, "bc", {98, 99}));
  ASSERT_EQ(s.resume(), StreamSplice::Next::kResend);
  EXPECT_EQ(json::parse(s.body())["prompt"], json({7, 8, 9, 97, 98, 99}));
  EXPECT_EQ(s.generated_tokens(), 3u);
  s.on_event(chunk("B", 2, "d", {100}, std::vector<int>{7, 8, 9, 97, 98, 99}));
  ASSERT_EQ(s.resume(), StreamSplice::Next::kResend) << "a second death";
  EXPECT_EQ(json::parse(s.body())["prompt"], json({7, 8, 9, 97, 98, 99, 100}));
  EXPECT_EQ(s.generated_tokens(), 4u) << "the ids of both engines before";
  s.on_event(chunk("C", 3, "e", {101}, std::nullopt, "length"));
  EXPECT_EQ(s.resume(), StreamSplice::Next::kFinish);
  EXPECT_EQ(s.generated_tokens(), 0u) << "no next body";
  // Killed before any token: the prompt as it was, nothing generated in it.
  StreamSplice early(stream_request({{"prompt", {7, 8}}, {"max_tokens", 4}}), 1 << 20);
  early.on_event(chunk("A", 1, "", {}, std::vector<int>{7, 8}));
  ASSERT_EQ(early.resume(), StreamSplice::Next::kResend);
  EXPECT_EQ(json::parse(early.body())["prompt"], json({7, 8}));
  EXPECT_EQ(early.generated_tokens(), 0u);
  // An engine that reported an empty prompt: no id before the generated ones, so no count the engine
  // could take (it needs at least one prompt id before them).
  StreamSplice empty(stream_request({{"prompt", "hi"}, {"max_tokens", 4}}), 1 << 20);
  empty.on_event(chunk("A", 1, "x", {120}, std::vector<int>{}));
  ASSERT_EQ(empty.resume(), StreamSplice::Next::kResend);
  EXPECT_EQ(json::parse(empty.body())["prompt"], json({120}));
  EXPECT_EQ(empty.generated_tokens(), 0u);
  // Text: the prompt's text and the text sent, tokenized by the next engine.
  StreamSplice t(stream_request({{"prompt", "hi"}, {"max_tokens", 5}}), 1 << 20);
  ojson c = ojson::parse(chunk("A", 1, "xy", {}).substr(6));
  c["choices"][0].erase("token_ids");
  t.on_event("data: " + c.dump() + "\n\n");
  ASSERT_EQ(t.resume(), StreamSplice::Next::kResend);
  EXPECT_EQ(json::parse(t.body())["prompt"], "hixy");
  EXPECT_EQ(t.generated_tokens(), 0u);
}

TEST(FrontSplice, FinishedStreamGetsUsageAndDoneFromTheFront) {
  StreamSplice s(stream_request({{"prompt", {7, 8}}, {"max_tokens", 2}, {"stream_options", json::object()}}), 1 << 20);
  s.on_event(chunk("A", 5, "a", {97}, std::vector<int>{7, 8}));
  s.on_event(chunk("A", 5, "b", {98}, std::nullopt, "length"));
  ASSERT_EQ(s.resume(), StreamSplice::Next::kFinish);
  EXPECT_EQ(s.tail(), usage("A", 5, 2, 2) + "data: [DONE]\n\n");
}

TEST(FrontSplice, BrokenEventsAndOversizedContinuationsAreNotContinued) {
  StreamSplice s(stream_request({{"prompt", "hi"}, {"max_tokens", 5}}), 1 << 20);
  EXPECT_EQ(s.on_event("data: {not json\n\n"), "data: {not json\n\n");
  EXPECT_EQ(s.resume(), StreamSplice::Next::kCannot);
  EXPECT_EQ(s.reason(), "bad_chunk");
  StreamSplice e(stream_request({{"prompt", "hi"}, {"max_tokens", 5}}), 1 << 20);
  e.on_event("data: {\"error\":{\"message\":\"x\"}}\n\n");
  EXPECT_EQ(e.resume(), StreamSplice::Next::kCannot);
  EXPECT_EQ(e.reason(), "engine_error");
  StreamSplice big(stream_request({{"prompt", "hi"}, {"max_tokens", 500}}), 60);
  ASSERT_TRUE(big.continuable());
  for (int i = 0; i < 10; ++i) big.on_event(chunk("A", 1, "x", {120}, std::vector<int>{1}));
  EXPECT_EQ(big.resume(), StreamSplice::Next::kCannot);
  EXPECT_EQ(big.reason(), "body_too_large");
}

// ---- chat ----

Request chat_request(json body) { return stream_request(std::move(body), "/v1/chat/completions"); }

json user(const char* text) { return json::array({{{"role", "user"}, {"content", text}}}); }

// A chat chunk as vLLM's serving_chat.py sends it: the role chunk (role set), a content chunk, or the last.
std::string chat_chunk(const std::string& id, int created, const std::optional<std::string>& role,
                       const std::string& content, const char* finish = nullptr) {
  ojson delta = ojson::object();
  if (role) delta["role"] = *role;
  delta["content"] = content;
  ojson c = {{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish ? ojson(finish) : ojson(nullptr)}};
  if (!role) c["token_ids"] = nullptr;
  ojson j = {{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", "m"},
             {"choices", ojson::array({c})}};
  if (role) j["prompt_token_ids"] = nullptr;
  return "data: " + j.dump() + "\n\n";
}

std::string chat_usage(const std::string& id, int created, int prompt, int completion) {
  ojson j = {{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", "m"},
             {"choices", ojson::array()},
             {"usage", {{"prompt_tokens", prompt}, {"total_tokens", prompt + completion}, {"completion_tokens", completion}}}};
  return "data: " + j.dump() + "\n\n";
}

TEST(FrontSpliceChat, WhatIsNotContinuedSaysWhy) {
  const json m = user("hi");
  struct Case {
    json body;
    const char* reason;
  } cases[] = {
      {{{"messages", m}, {"max_tokens", 4}, {"n", 2}}, "n"},
      {{{"messages", m}, {"max_tokens", 4}, {"logprobs", true}}, "logprobs"},
      {{{"messages", m}, {"max_tokens", 4}, {"top_logprobs", 2}}, "logprobs"},
      {{{"messages", m}, {"max_tokens", 4}, {"tools", json::array({1})}}, "tools"},
      {{{"messages", m}, {"max_tokens", 4}, {"tool_choice", "auto"}}, "tools"},
      {{{"messages", m}, {"max_tokens", 4}, {"response_format", {{"type", "json_object"}}}}, "guided"},
      {{{"messages", m}, {"max_tokens", 4}, {"structured_outputs", {{"regex", "a"}}}}, "guided"},
      {{{"messages", m}, {"max_tokens", 4}, {"stop", "x"}}, "stop"},
      {{{"messages", m}}, "max_tokens"},
      {{{"messages", m}, {"max_completion_tokens", 0}, {"max_tokens", 4}}, "max_tokens"},
      {{{"messages", json::array()}, {"max_tokens", 4}}, "messages"},
      {{{"messages", m}, {"max_tokens", 4}, {"add_generation_prompt", false}}, "generation_prompt"},
      {{{"messages", m}, {"max_tokens", 4}, {"add_generation_prompt", false}, {"continue_final_message", true}},
       "messages"},
  };
  for (const auto& c : cases) {
    StreamSplice s(chat_request(c.body), 1 << 20);
    EXPECT_FALSE(s.continuable()) << c.body.dump();
    EXPECT_EQ(s.reason(), c.reason) << c.body.dump();
    EXPECT_FALSE(s.why().empty());
    EXPECT_EQ(s.forward_body(), chat_request(c.body).body);
  }
  StreamSplice ok(chat_request({{"messages", m}, {"max_completion_tokens", 4}, {"logprobs", false}}), 1 << 20);
  EXPECT_TRUE(ok.continuable()) << ok.why();
  EXPECT_EQ(ok.forward_body(), chat_request({{"messages", m}, {"max_completion_tokens", 4}, {"logprobs", false}}).body)
      << "a chat is sent as the client wrote it";
}

TEST(FrontSpliceChat, ContinuesTheAssistantMessageAndSplicesOneStream) {
  const json body = {{"messages", user("hi")},
                     {"max_completion_tokens", 6},
                     {"max_tokens", 9},
                     {"temperature", 0},
                     {"stream_options", {{"include_usage", true}}}};
  StreamSplice s(chat_request(body), 1 << 20);
  ASSERT_TRUE(s.continuable()) << s.why();
  // The first engine's events reach the client unchanged.
  for (const auto& ev : {chat_chunk("A", 100, "assistant", ""), chat_chunk("A", 100, std::nullopt, "He"),
                         chat_chunk("A", 100, std::nullopt, "l")})
    EXPECT_EQ(s.on_event(ev), ev);
  ASSERT_EQ(s.resume(), StreamSplice::Next::kResend);
  auto next = json::parse(s.body());
  EXPECT_EQ(next["messages"], json::parse(R"([{"role":"user","content":"hi"},{"role":"assistant","content":"Hel"}])"));
  EXPECT_EQ(next["continue_final_message"], true);
  EXPECT_EQ(next["add_generation_prompt"], false);
  EXPECT_EQ(next["max_completion_tokens"], 4) << "two tokens sent";
  EXPECT_EQ(next["max_tokens"], 7);
  EXPECT_EQ(next["temperature"], 0);
  EXPECT_EQ(next["stream_options"]["include_usage"], true);
  EXPECT_FALSE(next.contains("return_token_ids"));
  EXPECT_EQ(s.generated_tokens(), 0u) << "a chat is continued as text";
  // The next engine's role chunk is dropped; its chunks carry the first engine's id and created.
  EXPECT_EQ(s.on_event(chat_chunk("B", 200, "assistant", "")), "");
  auto out = s.on_event(chat_chunk("B", 200, std::nullopt, "lo"));
  auto j = ojson::parse(out.substr(6));
  EXPECT_EQ(j["id"], "A");
  EXPECT_EQ(j["created"], 100);
  EXPECT_EQ(j["object"], "chat.completion.chunk");
  EXPECT_EQ(j["choices"][0]["delta"]["content"], "lo");
  EXPECT_EQ(out, chat_chunk("A", 100, std::nullopt, "lo")) << "only id and created change";
  s.on_event(chat_chunk("B", 200, std::nullopt, "!", "length"));
  // Its usage counted the content sent as prompt: the client reads the original prompt and every token.
  j = ojson::parse(s.on_event(chat_usage("B", 200, 12, 2)).substr(6));
  EXPECT_EQ(j["usage"]["prompt_tokens"], 10);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  EXPECT_EQ(j["usage"]["total_tokens"], 14);
  EXPECT_EQ(j["id"], "A");
  EXPECT_EQ(s.on_event("data: [DONE]\n\n"), "data: [DONE]\n\n");
  EXPECT_EQ(s.resume(), StreamSplice::Next::kFinish);
}

TEST(FrontSpliceChat, OwnFinalMessageHeldBackBytesAndASecondDeath) {
  // The request continues its own assistant message: the text sent is appended to it.
  const json body = {{"messages", json::parse(R"([{"role":"user","content":"q"},{"role":"assistant","content":"Once"}])")},
                     {"max_tokens", 10},
                     {"add_generation_prompt", false},
                     {"continue_final_message", true}};
  StreamSplice s(chat_request(body), 1 << 20);
  ASSERT_TRUE(s.continuable()) << s.why();
  s.on_event(chat_chunk("A", 1, "assistant", ""));
  s.on_event(chat_chunk("A", 1, std::nullopt, " up"));
  s.on_event(chat_chunk("A", 1, std::nullopt, ""));  // a byte held back until its character is whole
  ASSERT_EQ(s.resume(), StreamSplice::Next::kResend);
  auto next = json::parse(s.body());
  EXPECT_EQ(next["messages"][1]["content"], "Once up");
  EXPECT_EQ(next["messages"].size(), 2u);
  EXPECT_EQ(next["max_tokens"], 9) << "the chunk without text is generated again";
  EXPECT_EQ(s.on_event(chat_chunk("B", 2, "assistant", "")), "");
  s.on_event(chat_chunk("B", 2, std::nullopt, " o"));
  s.on_event(chat_chunk("B", 2, std::nullopt, "n"));
  // Killed again: continued from the original request with everything sent.
  ASSERT_EQ(s.resume(), StreamSplice::Next::kResend);
  next = json::parse(s.body());
  EXPECT_EQ(next["messages"][1]["content"], "Once up on");
  EXPECT_EQ(next["max_tokens"], 7);
  EXPECT_EQ(s.continuations(), 2);
}

TEST(FrontSpliceChat, NothingButTheRoleSentResendsTheRequest) {
  const json body = {{"messages", user("hi")}, {"max_tokens", 5}};
  StreamSplice s(chat_request(body), 1 << 20);
  s.on_event(chat_chunk("A", 1, "assistant", ""));
  ASSERT_EQ(s.resume(), StreamSplice::Next::kResend);
  EXPECT_EQ(json::parse(s.body()), json::parse(chat_request(body).body)) << "the request as it was";
  EXPECT_EQ(s.on_event(chat_chunk("B", 2, "assistant", "")), "") << "the client has a role chunk";
}

TEST(FrontSpliceChat, ToolCallReasoningAndFinishedStreams) {
  StreamSplice t(chat_request({{"messages", user("hi")}, {"max_tokens", 5}}), 1 << 20);
  t.on_event(chat_chunk("A", 1, "assistant", ""));
  ojson call = ojson::parse(chat_chunk("A", 1, std::nullopt, "").substr(6));
  call["choices"][0]["delta"] = {{"tool_calls", ojson::array({{{"index", 0}, {"id", "c1"}, {"type", "function"},
                                                               {"function", {{"name", "f"}, {"arguments", ""}}}}})}};
  const std::string ev = "data: " + call.dump() + "\n\n";
  EXPECT_EQ(t.on_event(ev), ev) << "passed on as it came";
  EXPECT_EQ(t.resume(), StreamSplice::Next::kCannot);
  EXPECT_EQ(t.reason(), "tool_call");
  EXPECT_NE(t.why().find("tool call had started"), std::string::npos);

  StreamSplice r(chat_request({{"messages", user("hi")}, {"max_tokens", 5}}), 1 << 20);
  ojson think = ojson::parse(chat_chunk("A", 1, std::nullopt, "").substr(6));
  think["choices"][0]["delta"] = {{"reasoning_content", "hmm"}};
  r.on_event("data: " + think.dump() + "\n\n");
  EXPECT_EQ(r.resume(), StreamSplice::Next::kCannot);
  EXPECT_EQ(r.reason(), "reasoning");

  // The last token sent, usage and [DONE] not: the front writes them, the prompt counted from a usage the
  // engine sent on its chunks (continuous_usage_stats).
  StreamSplice f(chat_request({{"messages", user("hi")}, {"max_tokens", 2},
                               {"stream_options", {{"include_usage", true}, {"continuous_usage_stats", true}}}}),
                 1 << 20);
  ojson first = ojson::parse(chat_chunk("A", 7, "assistant", "").substr(6));
  first["usage"] = {{"prompt_tokens", 20}, {"total_tokens", 20}, {"completion_tokens", 0}};
  f.on_event("data: " + first.dump() + "\n\n");
  f.on_event(chat_chunk("A", 7, std::nullopt, "a"));
  f.on_event(chat_chunk("A", 7, std::nullopt, "b", "length"));
  ASSERT_EQ(f.resume(), StreamSplice::Next::kFinish);
  EXPECT_EQ(f.tail(), chat_usage("A", 7, 20, 2) + "data: [DONE]\n\n");
  // Without a prompt count the usage cannot be written: said, not guessed.
  StreamSplice g(chat_request({{"messages", user("hi")}, {"max_tokens", 1}, {"stream_options", json::object()}}), 1 << 20);
  g.on_event(chat_chunk("A", 7, "assistant", ""));
  g.on_event(chat_chunk("A", 7, std::nullopt, "a", "length"));
  EXPECT_EQ(g.resume(), StreamSplice::Next::kCannot);
  EXPECT_EQ(g.reason(), "usage");
}

}  // namespace
}  // namespace fr::front
