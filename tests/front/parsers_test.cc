// The front's request parser and SSE splitter on their own: framing, limits, and errors that name the fault.
#include <gtest/gtest.h>

#include <string>

#include "front/http_request.h"
#include "front/http_response.h"
#include "front/sse.h"

namespace fr::front {
namespace {

TEST(FrontRequestParser, PipelinedRequestsOneAtATime) {
  RequestParser p({1000, 4096});
  const std::string two =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n"
      "{\"stream\":true}"
      "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  // Content-Length 13 cuts the first body short of its closing brace: the rest is the next request's start.
  size_t used = p.feed(two.data(), two.size());
  ASSERT_TRUE(p.complete());
  EXPECT_EQ(p.request().method, "POST");
  EXPECT_EQ(p.request().body, "{\"stream\":tru");
  p.reset();
  const std::string rest = two.substr(used);
  p.feed(rest.data(), rest.size());
  EXPECT_TRUE(p.failed());  // "e}GET ..." is no request line
  EXPECT_EQ(p.error_status(), 400);
}

TEST(FrontRequestParser, ByteByByteAndChunkedBody) {
  RequestParser p({1000, 4096});
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\n{\"n\":\r\n2\r\n2}\r\n0\r\n\r\n";
  for (char c : req) ASSERT_EQ(p.feed(&c, 1), 1u);
  ASSERT_TRUE(p.complete());
  EXPECT_EQ(p.request().body, "{\"n\":2}");
  EXPECT_FALSE(check_request(p.request()).has_value());
  EXPECT_EQ(p.request().n, 2);
  EXPECT_FALSE(p.request().stream);
}

TEST(FrontRequestParser, Limits) {
  {
    RequestParser p({100, 4096});
    const std::string req = "POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n";
    p.feed(req.data(), req.size());
    EXPECT_EQ(p.error_status(), 413);
    EXPECT_NE(p.error().find("front.max_body_bytes = 100"), std::string::npos) << p.error();
    // Found by fuzz_front_request: a refusal in on_headers_complete must not read as "no body follows".
    EXPECT_FALSE(p.complete());
  }
  {
    RequestParser p({100, 64});
    const std::string req = "GET /" + std::string(100, 'a') + " HTTP/1.1\r\n\r\n";
    p.feed(req.data(), req.size());
    EXPECT_EQ(p.error_status(), 431);
  }
  {
    RequestParser p({100, 4096});
    const std::string req = "GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n";
    p.feed(req.data(), req.size());
    EXPECT_EQ(p.error_status(), 400);
  }
}

TEST(FrontRequestParser, ContentTypeAndJson) {
  Request r;
  r.body = "{}";
  r.headers = {{"Content-Type", "text/plain"}};
  auto bad = check_request(r);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->first, 400);
  EXPECT_NE(bad->second.find("application/json"), std::string::npos);
  r.headers = {{"content-type", "application/json; charset=utf-8"}};
  r.body = "{\"prompt\": ";
  bad = check_request(r);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->first, 400);
  r.body = "{\"stream\": true}";
  EXPECT_FALSE(check_request(r));
  EXPECT_TRUE(r.stream);
}

TEST(FrontSse, EventsAcrossPiecesAndLineEnds) {
  SseSplitter s;
  // A lone "\r" at the end waits for the next byte ("\r\n" is one line end): the partial event after it
  // releases the third.
  const std::string in = "data: a\n\ndata: b\r\n\r\n\ndata: c\rdata: d\r\rdata: partial";
  std::vector<std::string> evs;
  for (char c : in) {
    s.feed(std::string_view(&c, 1));
    while (auto e = s.next_event()) evs.push_back(*e);
  }
  ASSERT_EQ(evs.size(), 3u);
  EXPECT_EQ(evs[0], "data: a\n\n");
  EXPECT_EQ(evs[1], "data: b\r\n\r\n");
  EXPECT_EQ(*data_of(evs[2]), "c\nd");
  EXPECT_FALSE(s.next_event());
  EXPECT_EQ(s.pending(), 13u);
}

TEST(FrontSse, OversizedEventFails) {
  SseSplitter s(16);
  s.feed("data: " + std::string(32, 'x'));
  EXPECT_FALSE(s.next_event());
  EXPECT_TRUE(s.failed());
}

// Whether the engine's connection may carry the next request (the front's upstream pool keeps it then).
bool reusable_after(const std::string& answer, bool eof = false, bool head = false) {
  std::string body;
  ResponseParser p(head, [&](std::string_view d) {
    body.append(d);
    return true;
  });
  p.feed(answer.data(), answer.size());
  if (eof) p.feed_eof();
  return p.complete() && p.reusable();
}

TEST(FrontResponseParser, ReusableOnlyWhenFramedKeptAliveAndClean) {
  const std::string ok = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
  EXPECT_TRUE(reusable_after(ok));
  EXPECT_TRUE(reusable_after("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"));
  EXPECT_TRUE(reusable_after("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"));
  EXPECT_TRUE(reusable_after("HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n", false, true));  // HEAD
  // The engine asks to close; HTTP/1.0 without keep-alive; a body delimited by the connection's end.
  EXPECT_FALSE(reusable_after("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"));
  EXPECT_FALSE(reusable_after("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}"));
  EXPECT_FALSE(reusable_after("HTTP/1.1 200 OK\r\n\r\n{}", true));
  // Bytes nobody asked for after the answer, in the same read: the connection is out of step.
  EXPECT_FALSE(reusable_after(ok + "HTTP/1.1 200 OK\r\n"));
  // Cut before its end.
  EXPECT_FALSE(reusable_after(ok.substr(0, ok.size() - 1), true));
}

}  // namespace
}  // namespace fr::front
