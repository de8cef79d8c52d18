// The real binary over HTTP: endpoints, errors, readiness and graceful SIGTERM.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "common/fd.h"
#include "engine_process.h"
#include "tinyengine/checkpoint.h"
#include "support/harness.h"

namespace fr::te::test {
namespace {

using nlohmann::json;

TEST(TinyEngineHttp, EndpointsAnswer) {
  Engine e(tiny_checkpoint(), {"--served-model-name", "tiny", "--gpu-memory-utilization", "0.75"});
  ASSERT_TRUE(e.wait_ready()) << e.log();
  auto [hs, h] = e.get("/health");
  EXPECT_EQ(hs, 200);

  auto [ms, models] = e.get("/v1/models");
  ASSERT_EQ(ms, 200);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(models["data"][0]["max_model_len"], 256);
  EXPECT_EQ(models["data"][0]["fastrestart"]["load"]["path"], "disk");
  EXPECT_EQ(models["data"][0]["fastrestart"]["gpu_memory_utilization"], 0.75);

  auto [cs, c] = e.post("/v1/completions", completion_request("Hello", 6));
  ASSERT_EQ(cs, 200) << c.dump();
  EXPECT_EQ(answer_of(c).tokens.size(), 6u);
  EXPECT_EQ(answer_of(c).logprobs.size(), 6u);
  auto [cs2, c2] = e.post("/v1/completions", {{"prompt", {72, 101, 108, 108, 111}}, {"max_tokens", 6}, {"logprobs", 0}});
  ASSERT_EQ(cs2, 200);
  EXPECT_EQ(answer_of(c), answer_of(c2));  // "Hello" as token ids

  auto [ss, stats] = e.get("/stats");
  ASSERT_EQ(ss, 200);
  EXPECT_EQ(stats["state"], "ready");
  EXPECT_EQ(stats["pid"], e.pid());
  EXPECT_EQ(stats["load"]["format"], "disk");
  EXPECT_EQ(stats["load"]["path"], "disk");
  EXPECT_GT(stats["load"]["weight_bytes"].get<uint64_t>(), 0u);
  EXPECT_GE(stats["load"]["disk_bytes_read"].get<uint64_t>(), stats["load"]["weight_bytes"].get<uint64_t>());
  EXPECT_TRUE(stats["load"]["phases"].contains("disk_read_s"));
  EXPECT_TRUE(stats["startup"].contains("ready_s"));
  EXPECT_EQ(stats["requests"]["completions"], 2);
  EXPECT_EQ(stats["gpu_memory_utilization"], 0.75);
  EXPECT_NE(e.log().find("load path=disk"), std::string::npos);
}

TEST(TinyEngineHttp, ErrorsAreJson) {
  Engine e(tiny_checkpoint(), {});
  ASSERT_TRUE(e.wait_ready()) << e.log();
  auto c = e.client();
  auto r = c.Post("/v1/completions", "{oops", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  auto j = json::parse(r->body);
  EXPECT_EQ(j["error"]["code"], 400);
  EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
  auto [ns, nf] = e.get("/v2/nothing");
  EXPECT_EQ(ns, 404);
  EXPECT_EQ(nf["error"]["code"], 404);
  EXPECT_EQ(e.get("/stats").second["requests"]["errors"], 1);
}

TEST(TinyEngineHttp, HealthIs503WhileLoadingThen200) {
  Engine e(tiny_checkpoint(), {"--fault-startup-delay", "0.6"});
  ASSERT_TRUE(e.wait_port()) << e.log();
  EXPECT_EQ(e.get("/health").first, 503);
  EXPECT_EQ(e.get("/stats").second["state"], "loading");
  EXPECT_EQ(e.post("/v1/completions", completion_request("a")).first, 503);
  ASSERT_TRUE(e.wait_ready()) << e.log();
  EXPECT_EQ(e.get("/stats").second["startup"]["startup_delay_s"], 0.6);
}

TEST(TinyEngineHttp, SigtermFinishesInFlightStopsAcceptingAndExits0) {
  Engine e(tiny_checkpoint(), {"--fault-token-delay", "0.1"});
  ASSERT_TRUE(e.wait_ready()) << e.log();
  auto inflight = std::async(std::launch::async, [&] { return e.post("/v1/completions", completion_request("x", 10)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  e.signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(e.get("/health", 1).first, -1);  // the listening socket is closed
  auto [st, body] = inflight.get();
  EXPECT_EQ(st, 200) << e.log();
  EXPECT_EQ(answer_of(body).tokens.size(), 10u);
  EXPECT_EQ(e.wait_exit(5), 0) << e.log();
}

TEST(TinyEngineHttp, SigtermGracePeriodBoundsTheWait) {
  Engine e(tiny_checkpoint(), {"--fault-token-delay", "5", "--shutdown-grace", "0.5"});
  ASSERT_TRUE(e.wait_ready()) << e.log();
  auto inflight = std::async(std::launch::async, [&] { return e.post("/v1/completions", completion_request("x", 4), 30); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  e.signal(SIGTERM);
  EXPECT_EQ(e.wait_exit(5), 0) << e.log();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.0);
  EXPECT_NE(e.log().find("grace period"), std::string::npos);
  inflight.wait();
}

TEST(TinyEngineHttp, SigtermWhileLoadingExits0) {
  Engine e(tiny_checkpoint(), {"--fault-startup-delay", "30"});
  ASSERT_TRUE(e.wait_port()) << e.log();
  e.signal(SIGTERM);
  EXPECT_EQ(e.wait_exit(5), 0) << e.log();
}

TEST(TinyEngineHttp, BadUsageExits2AndBadCheckpointExits1) {
  auto usage = fr::test::run({tinyengine_bin(), "serve", tiny_checkpoint(), "--no-such-flag"});
  EXPECT_EQ(usage.exit_code, 2) << usage.output;
  auto tp = fr::test::run({tinyengine_bin(), "serve", tiny_checkpoint(), "--tensor-parallel-size", "9"});
  EXPECT_EQ(tp.exit_code, 2) << tp.output;
  Engine e("/nonexistent/checkpoint", {});
  EXPECT_EQ(e.wait_exit(5), 1) << e.log();
  EXPECT_NE(e.log().find("does not exist"), std::string::npos);
}

// The TCP port of a socket's own (peer: the other end's) address; 0 when it has none.
uint16_t port_of(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t n = sizeof a;
  if ((peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n) : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n)) != 0 ||
      a.sin_family != AF_INET)
    return 0;
  return ntohs(a.sin_port);
}

// A kept-alive connection's answer must not wait on the client's delayed ACK: the engine's connection to
// this client, found among the engine's own descriptors (pidfd_getfd), has TCP_NODELAY, and so does its
// listening socket, from which accepted connections inherit it.
TEST(TinyEngineHttp, TheEnginesConnectionsHaveTcpNodelay) {
  Engine e(tiny_checkpoint(), {});
  ASSERT_TRUE(e.wait_ready()) << e.log();
  UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(e.port()));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(client.get(), reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
  const std::string req = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";  // kept alive: HTTP/1.1
  ASSERT_EQ(::write(client.get(), req.data(), req.size()), static_cast<ssize_t>(req.size()));
  char buf[512];
  ASSERT_GT(::read(client.get(), buf, sizeof buf), 0);  // answered: the engine has accepted it
  const uint16_t mine = port_of(client.get(), false);

  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, e.pid(), 0)));
  if (!pidfd) GTEST_SKIP() << "pidfd_open: " << std::strerror(errno);
  int checked_listener = 0, checked_connection = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/" + std::to_string(e.pid()) + "/fd")) {
    const int target = std::stoi(entry.path().filename());
    UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.get(), target, 0)));
    if (!fd) {
      if (errno == EPERM) GTEST_SKIP() << "pidfd_getfd needs ptrace rights over the engine (root, or ptrace_scope 0)";
      continue;
    }
    int type = 0;
    socklen_t len = sizeof type;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    const bool listener = port_of(fd.get(), false) == e.port() && port_of(fd.get(), true) == 0;
    const bool ours = port_of(fd.get(), true) == mine;
    if (!listener && !ours) continue;
    int nodelay = 0;
    len = sizeof nodelay;
    ASSERT_EQ(::getsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &nodelay, &len), 0);
    EXPECT_NE(nodelay, 0) << (listener ? "the listening socket" : "the connection to the test") << ", fd " << target;
    (listener ? checked_listener : checked_connection) += 1;
  }
  EXPECT_EQ(checked_listener, 1);
  EXPECT_EQ(checked_connection, 1);
}

TEST(TinyEngineHttp, PortInUseExits1) {
  Engine a(tiny_checkpoint(), {});
  ASSERT_TRUE(a.wait_ready()) << a.log();
  auto r = fr::test::run({"/usr/bin/timeout", "10", tinyengine_bin(), "serve", tiny_checkpoint(), "--port",
                          std::to_string(a.port())});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cannot listen"), std::string::npos);
}

TEST(TinyEngineHttp, GenSubcommandWritesACheckpointOfTheChosenSize) {
  fr::test::TempDir d;
  auto r = fr::test::run({tinyengine_bin(), "gen", "--out", d.path(), "--size", "3M", "--dtype", "BF16"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto info = inspect_checkpoint(d.path());
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  EXPECT_EQ(info->config.dtype, DType::kBF16);
  EXPECT_NEAR(static_cast<double>(total_weight_bytes(info->config)), 3.0 * (1 << 20), 0.01 * (3 << 20));
  Engine e(d.path(), {});
  ASSERT_TRUE(e.wait_ready()) << e.log();
  EXPECT_EQ(e.post("/v1/completions", completion_request("hi", 3)).first, 200);
}

// POST /v1/chat/completions on the real binary, its checkpoint written by `gen --printable`: the answer is
// printable text, the completion of the rendered prompt; the stream is text/event-stream; vLLM's 400s.
TEST(TinyEngineHttp, ChatAnswersAndStreamsOnAPrintableCheckpoint) {
  fr::test::TempDir d;
  auto r = fr::test::run({tinyengine_bin(), "gen", "--out", d.path(), "--printable", "--seed", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Engine e(d.path(), {"--served-model-name", "tiny"});
  ASSERT_TRUE(e.wait_ready()) << e.log();
  const json messages = json::array({{{"role", "user"}, {"content", "hello"}}});
  auto [st, chat] = e.post("/v1/chat/completions", {{"model", "tiny"}, {"messages", messages}, {"max_tokens", 16}});
  ASSERT_EQ(st, 200) << chat.dump();
  EXPECT_EQ(chat["object"], "chat.completion");
  const std::string content = chat["choices"][0]["message"]["content"];
  EXPECT_FALSE(content.empty());
  EXPECT_TRUE(std::all_of(content.begin(), content.end(), [](char c) { return c >= 0x20 && c < 0x7f; })) << content;
  auto [cs, completion] = e.post("/v1/completions", {{"prompt", "user: hello\nassistant: "}, {"max_tokens", 16}});
  ASSERT_EQ(cs, 200);
  EXPECT_EQ(completion["choices"][0]["text"], content);
  auto c = e.client();
  auto stream = c.Post("/v1/chat/completions", json{{"messages", messages}, {"max_tokens", 4}, {"stream", true}}.dump(),
                       "application/json");
  ASSERT_TRUE(stream);
  EXPECT_EQ(stream->status, 200);
  EXPECT_EQ(stream->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_NE(stream->body.find("\"delta\":{\"role\":\"assistant\",\"content\":\"\"}"), std::string::npos) << stream->body;
  EXPECT_TRUE(stream->body.ends_with("data: [DONE]\n\n"));
  auto [bs, both] = e.post("/v1/chat/completions",
                           {{"messages", messages}, {"continue_final_message", true}, {"add_generation_prompt", true}});
  EXPECT_EQ(bs, 400);
  EXPECT_NE(both["error"]["message"].get<std::string>().find("Cannot set both"), std::string::npos) << both.dump();
}

// The end-to-end form of weight sensitivity: an engine handed a checkpoint that differs in one weight
// answers differently, so a test comparing answers catches wrong weights.
TEST(TinyEngineHttp, OneChangedWeightInTheFileChangesTheServedAnswer) {
  fr::test::TempDir d;
  ASSERT_EQ(::system(("cp " + tiny_checkpoint() + "/model.safetensors " + d.path() + "/").c_str()), 0);
  auto info = inspect_checkpoint(d.path());
  ASSERT_TRUE(info.ok());
  const auto& t = info->headers[0].tensors.back();  // lm_head: every element is read for every token
  ASSERT_EQ(t.name, "lm_head");
  {
    std::fstream f(d / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(t.begin + t.nbytes() / 2 + 3);  // the exponent byte of a float
    f.seekg(at);
    char b = 0;
    f.read(&b, 1);
    b = static_cast<char>(b ^ 0x01);
    f.seekp(at);
    f.write(&b, 1);
  }
  Engine a(tiny_checkpoint(), {});
  Engine b(d.path(), {});
  ASSERT_TRUE(a.wait_ready() && b.wait_ready()) << a.log() << b.log();
  const auto req = completion_request("The weights must match", 8);
  EXPECT_NE(answer_of(a.post("/v1/completions", req).second), answer_of(b.post("/v1/completions", req).second));
}

TEST(TinyEngineHttp, SigtermWhileHungExitsAfterTheGracePeriod) {
  Engine e(tiny_checkpoint(), {"--fault-hang-after-requests", "0", "--shutdown-grace", "0.3"});
  ASSERT_TRUE(e.wait_port()) << e.log();
  auto stuck = std::async(std::launch::async, [&] { return e.get("/health", 5); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  e.signal(SIGTERM);
  EXPECT_EQ(e.wait_exit(3), 0) << e.log();
  stuck.wait();
}

}  // namespace
}  // namespace fr::te::test
