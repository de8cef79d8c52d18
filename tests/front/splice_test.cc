// StreamSplice on its own: which streams can be continued, what the engine is sent, and how a
// continuation's events are rewritten into the client's stream.
#include "front/splice.h"

#include <gtest/gtest.h>

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
  StreamSplice chat(stream_request({{"messages", json::array()}, {"max_tokens", 4}}, "/v1/chat/completions"), 1 << 20);
  EXPECT_EQ(chat.reason(), "endpoint");
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

}  // namespace
}  // namespace fr::front
