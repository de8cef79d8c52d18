// Streams continued across a kill -9 recompute at most one block each (docs/kv-survival.md, "Continued
// streams"): the real fastrestartd with engine.listen = "front", its real host weight daemon, and the tiny
// engine with its prefix cache on a host KV arena. Six streams are mid-stream when the engine is SIGKILLed;
// the front continues each on the next engine with the prompt's token ids plus the ids already sent. That
// engine recovered the index from the arena, where the first engine published every full block it computed,
// the generated tokens' blocks included. Its prefix counters (fastrestartd's status row kv_cache) then show
// the continuations recomputing at most block_tokens positions each; every stream is byte-equal (id and
// created aside) to an uninterrupted one.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "support/fastrestartd_config.h"
#include "support/harness.h"
#include "support/supervised.h"

namespace fr {
namespace {

using nlohmann::json;

constexpr int kBlockTokens = 4;
constexpr int kStreams = 6;
constexpr int kMaxTokens = 40;
constexpr int kKillAfter = 10;  // token events each stream has read before the kill: past its prompt's blocks

// Prompts of 3 to 5 blocks, no two sharing a first block (each stream's blocks are its own).
std::string prompt_of(int i) { return std::to_string(i) + ": tell me a story" + std::string(static_cast<size_t>(i % 3) * 3, '!'); }

// The body of a chunked HTTP/1.1 answer (the front streams with chunked encoding), or the raw rest.
std::string dechunk(const std::string& raw) {
  const size_t head = raw.find("\r\n\r\n");
  if (head == std::string::npos) return "";
  std::string body = raw.substr(head + 4);
  if (raw.substr(0, head).find("chunked") == std::string::npos) return body;
  std::string out;
  size_t at = 0;
  while (at < body.size()) {
    const size_t eol = body.find("\r\n", at);
    if (eol == std::string::npos) break;
    const size_t n = std::stoul(body.substr(at, eol - at), nullptr, 16);
    if (n == 0) break;
    out += body.substr(eol + 2, n);
    at = eol + 2 + n + 2;
  }
  return out;
}

// The stream's events with id and created removed (they name the request, not what was generated).
std::vector<std::string> events_of(const std::string& body) {
  std::vector<std::string> ev;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    std::string data = body.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
    at = end == std::string::npos ? body.size() : end + 2;
    auto j = json::parse(data, nullptr, false);
    if (j.is_object()) {
      j.erase("id");
      j.erase("created");
      data = j.dump();
    }
    ev.push_back(data);
  }
  return ev;
}

// One streamed completion over a raw socket: `reached` is raised once kKillAfter token events arrived.
std::string stream_completion(uint16_t port, const std::string& prompt, std::atomic<int>* reached) {
  UniqueFd fd = fr::test::connect_loopback(port, 120);
  if (!fd) return "connect failed";
  const std::string body =
      json{{"model", "t"}, {"prompt", prompt}, {"max_tokens", kMaxTokens}, {"stream", true}, {"temperature", 0}}.dump();
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  if (::send(fd.get(), req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) return "send failed";
  std::string raw;
  bool counted = false;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
    if (!counted && reached) {
      int events = 0;
      for (size_t at = raw.find("\"text\""); at != std::string::npos; at = raw.find("\"text\"", at + 1)) ++events;
      if (events >= kKillAfter) {
        counted = true;
        ++*reached;
      }
    }
  }
  return dechunk(raw);
}

TEST(FrontKvE2e, StreamsContinuedAfterKillNineRecomputeAtMostOneBlockEach) {
  test::TempDir dir;
  ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", dir / "model", "--size", "4M"}).exit_code, 0);
  const uint16_t port = test::free_port(), http = test::free_port();
  const std::string run = dir / "run";
  test::FastrestartdConfig c(dir.path());
  // A token delay keeps every stream going for seconds after its first token; the arena holds every block
  // of the streams and of the reference run (no eviction).
  c.tiny_engine({.binary = FR_TINYENGINE_BIN, .model = dir / "model", .port = port,
                 .flags = {"--load-format", "fastrestart", "--fastrestart-socket-dir", run, "--shutdown-grace", "2",
                           "--threads", "16", "--kv-arena-bytes", "16777216", "--kv-arena-wait", "10", "--block-size",
                           std::to_string(kBlockTokens), "--fault-token-delay", "0.1"}});
  // Readiness and liveness are health checks only (request_path = ""): the new engine's prefix counters
  // then count the front's continuations and nothing else.
  c.number("engine", "stop_grace_s", 3).text("engine", "listen", "front").number("engine", "listen_backlog", 64)
      .host_weights(dir / "model", run)
      .text("readiness", "model", "t").text("readiness", "request_path", "").text("readiness", "endpoint", "private")
      .number("readiness", "poll_interval_s", 0.05).number("readiness", "check_interval_s", 0.3)
      .number("restart", "backoff_initial_s", 0.05).number("restart", "backoff_max_s", 0.2)
      .number("restart", "crash_loop_limit", 50).number("restart", "warm_failures_before_cold", 0)
      .number("front", "hold_s", 60).text("front", "path", FR_FRONT_BIN)
      .http(http);
  auto sup = test::start_fastrestartd(FR_FASTRESTARTD_BIN, c);
  json st = sup->expect_ready();
  const pid_t first = st["engine"]["pid"];

  // Six streams, each kKillAfter tokens in (two decode blocks and more) when the engine is killed.
  std::atomic<int> started{0};
  std::vector<std::string> got(kStreams);
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i)
    clients.emplace_back([&, i] { got[static_cast<size_t>(i)] = stream_completion(port, prompt_of(i), &started); });
  for (int w = 0; started < kStreams && w < 60000; ++w) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(started.load(), kStreams) << sup->log();
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  for (auto& t : clients) t.join();
  st = sup->expect_ready(first);
  const pid_t second = st["engine"]["pid"];

  // The front continued all six; the new engine answered six requests, the continuations.
  ASSERT_TRUE(sup->wait_for([&](const json& s) {
    return s.value("front", json::object()).value("requests", json::object()).value("continued", 0) >= kStreams;
  }, 30, &st)) << st.dump(1) << sup->log();
  EXPECT_EQ(st["front"]["requests"]["continued"], kStreams) << st.dump(1);
  ASSERT_TRUE(sup->wait_for([&](const json& s) {
    return s["kv_cache"].is_object() && s["kv_cache"]["pid"] == second && s["kv_cache"]["counters"] == "file" &&
           s["kv_cache"]["prefix"]["requests"].get<uint64_t>() >= kStreams;
  }, 30, &st)) << st.dump(1) << sup->log();
  const json kv = st["kv_cache"];
  EXPECT_EQ(kv["header"], "valid") << kv.dump();
  EXPECT_EQ(kv["block_tokens"], kBlockTokens) << kv.dump();
  EXPECT_EQ(kv["prefix"]["requests"], kStreams) << kv.dump();
  const uint64_t query = kv["prefix"]["query_tokens"], hit = kv["prefix"]["hit_tokens"];
  // Each continuation's prompt is the original prompt plus at least kKillAfter tokens; its last position is
  // always computed (its logits are needed), so each recomputes at least one and, the claim, at most one
  // block. What hit lies past the prompts too: blocks the dead engine filled during decode.
  uint64_t prompts = 0;
  for (int i = 0; i < kStreams; ++i) prompts += prompt_of(i).size();
  EXPECT_GE(query, prompts + kStreams * kKillAfter) << kv.dump();
  EXPECT_GT(hit, prompts) << kv.dump();
  EXPECT_GE(query - hit, static_cast<uint64_t>(kStreams)) << kv.dump();
  EXPECT_LE(query - hit, static_cast<uint64_t>(kStreams * kBlockTokens)) << kv.dump();

  std::printf("continuations: %d, query_tokens %llu, hit_tokens %llu, recomputed %llu (block_tokens %d)\n", kStreams,
              static_cast<unsigned long long>(query), static_cast<unsigned long long>(hit),
              static_cast<unsigned long long>(query - hit), kBlockTokens);

  // Every stream is what an uninterrupted engine streams (asked after the counters were read).
  std::vector<std::string> wants(kStreams);
  clients.clear();
  for (int i = 0; i < kStreams; ++i)
    clients.emplace_back([&, i] { wants[static_cast<size_t>(i)] = stream_completion(port, prompt_of(i), nullptr); });
  for (auto& t : clients) t.join();
  for (int i = 0; i < kStreams; ++i) {
    const std::string& want = wants[static_cast<size_t>(i)];
    const auto w = events_of(want), g = events_of(got[static_cast<size_t>(i)]);
    ASSERT_GE(w.size(), 3u) << want;
    EXPECT_EQ(w.back(), "[DONE]") << want;
    EXPECT_EQ(g, w) << "stream " << i << ":\n" << got[static_cast<size_t>(i)] << "\nuninterrupted:\n" << want;
  }
  EXPECT_EQ(sup->stop(SIGTERM), 0) << sup->log();
}

}  // namespace
}  // namespace fr
