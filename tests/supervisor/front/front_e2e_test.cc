// engine.listen = "front" end to end (docs/front.md, "Running it"): the real fastrestartd binds the public
// port, starts the real fastrestart-front on it and the tiny engine behind it on fastrestartd's loopback
// socket. Clients send completions without pause while the engine is SIGKILLed: none fails, and each answer
// is what an uninterrupted engine gives (the tiny engine is deterministic). The front SIGKILLed under load is
// started again; SIGTERM lets the front finish what it holds before the engine stops.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <future>
#include <iterator>
#include <map>
#include <mutex>
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

// connect(2) to 127.0.0.1:port: 0 when it connected, else the errno.
int front_connect(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return ::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : errno;
}

const char* const kPrompts[] = {"The capital of France is", "Once upon a time", "fastrestart", "1 2 3 4"};

class FrontE2e : public ::testing::Test {
 protected:
  // printable: a `gen --printable` checkpoint, whose answers are printable text (a chat continued as text).
  void launch(const std::string& engine_flags = "", double front_grace_s = 5, bool printable = false) {
    std::vector<std::string> gen = {FR_TINYENGINE_BIN, "gen", "--out", m_dir / "model", "--size", "4M"};
    if (printable) gen.push_back("--printable");
    ASSERT_EQ(test::run(gen).exit_code, 0);
    m_port = test::free_port();
    m_http = test::free_port();
    const std::string run = m_dir / "run";
    test::FastrestartdConfig c(m_dir.path());
    c.tiny_engine({.binary = FR_TINYENGINE_BIN, .model = m_dir / "model", .port = m_port,
                   .flags = {"--load-format", "fastrestart", "--fastrestart-socket-dir", run, "--shutdown-grace", "2",
                             "--threads", "16"},
                   .more_flags = engine_flags});
    c.number("engine", "stop_grace_s", 3).text("engine", "listen", "front").number("engine", "listen_backlog", 64)
        .host_weights(m_dir / "model", run)
        .text("readiness", "model", "t").number("readiness", "poll_interval_s", 0.05)
        .number("readiness", "check_interval_s", 0.3).number("readiness", "check_timeout_s", 2)
        .text("readiness", "endpoint", "private")
        .number("restart", "backoff_initial_s", 0.05).number("restart", "backoff_max_s", 0.2)
        .number("restart", "crash_loop_limit", 50).number("restart", "warm_failures_before_cold", 0)
        .number("front", "hold_s", 60).number("front", "stop_grace_s", front_grace_s)
        .text("front", "path", FR_FRONT_BIN)
        .http(m_http);
    m_sup = test::start_fastrestartd(FR_FASTRESTARTD_BIN, c);
  }
  json ready(pid_t not_pid = 0) { return m_sup->expect_ready(not_pid); }
  test::HttpAnswer complete(const std::string& prompt, int max_tokens = 6, double timeout_s = 90) {
    return test::http_post(m_port, "/v1/completions", {{"model", "t"}, {"prompt", prompt}, {"max_tokens", max_tokens}},
                           timeout_s);
  }
  static std::string text_of(const test::HttpAnswer& a) {
    auto j = json::parse(a.body, nullptr, false);
    return j.is_object() && j.contains("choices") ? j["choices"][0].value("text", "") : "";
  }
  // What an uninterrupted engine answers to each prompt.
  std::map<std::string, std::string> reference() {
    std::map<std::string, std::string> want;
    for (const char* p : kPrompts) {
      const auto a = complete(p);
      EXPECT_EQ(a.status, 200) << a.body;
      want[p] = text_of(a);
      EXPECT_FALSE(want[p].empty()) << a.body;
    }
    return want;
  }
  // Clients that send completions, one after the other each, until stop; every answer is checked.
  struct Load {
    std::atomic<bool> stop{false};
    std::atomic<int> sent{0}, ok{0};
    std::mutex mu;
    std::vector<std::string> failures;
    std::vector<std::thread> threads;
  };
  void start_load(Load& load, int clients, const std::map<std::string, std::string>& want, std::atomic<bool>* tolerate = nullptr) {
    for (int c = 0; c < clients; ++c)
      load.threads.emplace_back([this, &load, &want, c, tolerate] {
        for (int i = 0; !load.stop; ++i) {
          const std::string prompt = kPrompts[(c + i) % std::size(kPrompts)];
          ++load.sent;
          const auto a = complete(prompt);
          if (a.status == 200 && text_of(a) == want.at(prompt)) {
            ++load.ok;
            continue;
          }
          if (tolerate && *tolerate) continue;  // in flight inside a front that was killed
          std::lock_guard<std::mutex> l(load.mu);
          load.failures.push_back(std::to_string(a.status) + " " + a.body.substr(0, 300));
        }
      });
  }
  static void end_load(Load& load) {
    load.stop = true;
    for (auto& t : load.threads) t.join();
  }
  json front_of(const json& st) { return st.value("front", json::object()); }

  test::TempDir m_dir;
  uint16_t m_port = 0, m_http = 0;
  std::unique_ptr<test::Supervised> m_sup;
};

// The engine SIGKILLed three times under a steady load: no client request fails and every answer is the
// uninterrupted engine's. Status and /metrics count what the front did.
TEST_F(FrontE2e, EngineKilledUnderLoadNoRequestFails) {
  launch(", \"--fault-token-delay\", \"0.01\"");
  json st = ready();
  const json front = front_of(st);
  ASSERT_EQ(front.value("state", ""), "running") << st.dump();
  EXPECT_EQ(front.value("upstream", "").rfind("127.0.0.1:", 0), 0u) << st.dump();
  EXPECT_NE(front.value("upstream", ""), "127.0.0.1:" + std::to_string(m_port));
  EXPECT_EQ(st["engine"].value("readiness_endpoint", "").rfind("private 127.0.0.1:", 0), 0u) << st.dump();
  const auto want = reference();
  Load load;
  start_load(load, 4, want);
  for (int kill = 0; kill < 3; ++kill) {
    // Some requests in flight before each kill.
    const int before = load.sent;
    while (load.sent < before + 4) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const pid_t engine = st["engine"]["pid"];
    ASSERT_EQ(::kill(engine, SIGKILL), 0);
    st = ready(engine);
  }
  const int before = load.sent;
  while (load.sent < before + 4) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  end_load(load);
  EXPECT_TRUE(load.failures.empty()) << load.failures.size() << " request(s) failed, the first: "
                                     << (load.failures.empty() ? "" : load.failures[0]) << "\n" << m_sup->log();
  EXPECT_EQ(load.ok.load(), load.sent.load());
  EXPECT_EQ(st["restarts"].value("crash", 0), 3) << st.dump();

  // The front writes its counters within 10 ms of a change, which may be just after its client read the answer.
  const int sent = load.sent.load() + 4, ok = load.ok.load() + 4;
  m_sup->wait_for([&](const json& j) {
    const json q = j.value("front", json::object()).value("requests", json::object());
    return q.value("received", 0) >= sent && q.value("answered", 0) >= ok;
  }, 30, &st);
  const json r = front_of(st).value("requests", json::object());
  EXPECT_EQ(front_of(st).value("restarts", -1), 0) << st.dump();
  EXPECT_GE(r.value("received", 0), sent) << st.dump();
  EXPECT_GE(r.value("answered", 0), ok) << st.dump();
  EXPECT_EQ(r.value("lost", -1), 0) << st.dump();
  EXPECT_EQ(r.value("failed", json::object()).value("hold_timeout", 0), 0) << st.dump();
  const std::string text = test::run({FR_FASTRESTARTCTL_BIN, "--socket", m_dir / "ctl/t.ctl", "status"}).output;
  EXPECT_NE(text.find("front              running, pid"), std::string::npos) << text;
  EXPECT_NE(text.find("front requests"), std::string::npos) << text;
  const auto metrics = test::http_get(m_http, "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("fastrestart_front_up 1\n"), std::string::npos) << metrics.body;
  EXPECT_NE(metrics.body.find("fastrestart_front_restarts_total 0\n"), std::string::npos) << metrics.body;
  EXPECT_NE(metrics.body.find("fastrestart_front_requests_total{outcome=\"answered\",reason=\"\"} "), std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("fastrestart_front_requests_total{outcome=\"lost\",reason=\"\"} 0\n"), std::string::npos)
      << metrics.body;
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
  EXPECT_EQ(front_connect(m_port), ECONNREFUSED);
}

// A streamed chat over a raw socket to the front, its body de-chunked; `events` counts its "data:" events
// as they arrive.
std::string stream_chat(uint16_t port, const json& body, std::atomic<int>* events = nullptr) {
  UniqueFd fd = test::connect_loopback(port, 120);
  if (!fd) return "connect failed";
  const std::string b = body.dump();
  const std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Connection: close\r\nContent-Length: " + std::to_string(b.size()) + "\r\n\r\n" + b;
  if (::send(fd.get(), req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) return "send failed";
  std::string raw;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd.get(), buf, sizeof buf, 0)) > 0;) {
    raw.append(buf, static_cast<size_t>(n));
    if (events) {
      int k = 0;
      for (size_t at = raw.find("data: "); at != std::string::npos; at = raw.find("data: ", at + 1)) ++k;
      *events = k;
    }
  }
  const size_t head = raw.find("\r\n\r\n");
  if (head == std::string::npos || raw.substr(0, head).find("chunked") == std::string::npos) return "not chunked: " + raw;
  std::string out;
  for (size_t at = head + 4;;) {
    const size_t eol = raw.find("\r\n", at);
    if (eol == std::string::npos) return "cut: " + raw;
    const size_t n = std::stoul(raw.substr(at, eol - at), nullptr, 16);
    if (n == 0) return out;
    out += raw.substr(eol + 2, n);
    at = eol + 2 + n + 2;
  }
}

// A chat stream's events as a client compares them: id and created removed (they name the engine process
// and the second); and its content, the deltas joined.
std::vector<std::string> chat_events(const std::string& body, std::string* content) {
  std::vector<std::string> out;
  for (size_t at = body.find("data: "); at != std::string::npos; at = body.find("data: ", at + 1)) {
    const size_t end = body.find("\n\n", at);
    std::string data = body.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
    auto j = nlohmann::ordered_json::parse(data, nullptr, false);
    if (j.is_object()) {
      j.erase("id");
      j.erase("created");
      if (j.contains("choices") && !j["choices"].empty() && j["choices"][0]["delta"].contains("content"))
        *content += j["choices"][0]["delta"]["content"].get<std::string>();
      data = j.dump();
    }
    out.push_back(data);
  }
  return out;
}

// Chat streams mid-way when the engine is SIGKILLed: the front continues each on the next engine with the
// content sent as the assistant's message (continue_final_message); every client reads the uninterrupted
// stream, event for event (id and created aside): one role chunk, the same content, one usage, one [DONE].
TEST_F(FrontE2e, ChatStreamsKilledMidWayReadAsUninterrupted) {
  launch(", \"--fault-token-delay\", \"0.05\"", 5, true);
  json st = ready();
  const pid_t first = st["engine"]["pid"];
  std::vector<json> bodies;
  for (int i = 0; i < 3; ++i)
    bodies.push_back({{"model", "t"},
                      {"messages", json::array({{{"role", "user"}, {"content", "question " + std::to_string(i)}}})},
                      {"max_completion_tokens", 30},
                      {"stream", true},
                      {"temperature", 0},
                      {"stream_options", {{"include_usage", true}}}});
  std::vector<std::string> want;
  for (const auto& b : bodies) want.push_back(stream_chat(m_port, b));
  std::vector<std::atomic<int>> events(bodies.size());
  std::vector<std::string> got(bodies.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < bodies.size(); ++i)
    clients.emplace_back([&, i] { got[i] = stream_chat(m_port, bodies[i], &events[i]); });
  // Each client has the role chunk and some content, far from the end (30 tokens, 0.05 s apart).
  for (int w = 0; w < 60000; ++w) {
    bool all = true;
    for (auto& e : events) all = all && e >= 8;
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (auto& e : events) ASSERT_GE(e.load(), 8) << m_sup->log();
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < bodies.size(); ++i) {
    std::string want_content, got_content;
    const auto w = chat_events(want[i], &want_content);
    const auto g = chat_events(got[i], &got_content);
    ASSERT_EQ(w.size(), 33u) << "role, 30 tokens, usage, [DONE]: " << want[i];
    EXPECT_EQ(g, w) << "stream " << i << ": " << got[i];
    EXPECT_EQ(got_content, want_content) << "stream " << i;
    EXPECT_EQ(got[i].find("error"), std::string::npos) << got[i];
  }
  ASSERT_TRUE(m_sup->wait_for([&](const json& s) {
    return front_of(s).value("requests", json::object()).value("continued", 0) >= 3;
  }, 30, &st)) << st.dump(1) << m_sup->log();
  EXPECT_EQ(front_of(st)["requests"]["continued"], 3) << st.dump();
  EXPECT_EQ(front_of(st).value("requests", json::object()).value("failed", json::object()).value("stream_interrupted", 0), 0)
      << st.dump();
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// The front SIGKILLed under load: fastrestartd starts another (counted, its exit logged), requests sent
// after that are answered, and only requests that were inside the dead front may have failed.
TEST_F(FrontE2e, FrontKilledUnderLoadIsStartedAgain) {
  launch(", \"--fault-token-delay\", \"0.01\"");
  json st = ready();
  const auto want = reference();
  Load load;
  std::atomic<bool> tolerate{true};
  start_load(load, 4, want, &tolerate);
  while (load.sent < 8) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const int64_t front = front_of(st).value("pid", 0);
  const int64_t engine = st["engine"].value("pid", 0);
  ASSERT_GT(front, 0) << st.dump();
  ASSERT_EQ(::kill(static_cast<pid_t>(front), SIGKILL), 0);
  ASSERT_TRUE(m_sup->wait_for([front](const json& j) {
    const json f = j.value("front", json::object());
    return f.value("restarts", 0) == 1 && f.value("pid", 0) > 0 && f.value("pid", 0) != front && f.value("state", "") == "running";
  }, 60, &st)) << st.dump() << m_sup->log();
  EXPECT_EQ(front_of(st).value("last_exit", ""), "signal 9 (Killed)") << st.dump();
  // From here on nothing may fail: requests go to the new front.
  end_load(load);
  Load after;
  start_load(after, 4, want);
  while (after.sent < 16) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  end_load(after);
  EXPECT_TRUE(after.failures.empty()) << after.failures.size() << " request(s) failed after the restart, the first: "
                                      << (after.failures.empty() ? "" : after.failures[0]) << "\n" << m_sup->log();
  EXPECT_EQ(m_sup->log().find("fastrestart-front pid " + std::to_string(front) + " exited: signal 9 (Killed)") == std::string::npos,
            false) << m_sup->log();
  st = m_sup->status();
  EXPECT_EQ(st.value("state", ""), "ready") << st.dump();
  EXPECT_EQ(st["engine"].value("pid", 0), engine) << "the engine was restarted: " << st.dump();
  const auto metrics = test::http_get(m_http, "/metrics");
  EXPECT_NE(metrics.body.find("fastrestart_front_restarts_total 1\n"), std::string::npos) << metrics.body;
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

// SIGTERM: the front stops taking requests and lets the one in flight finish (its answer is whole), then
// the engine stops, then fastrestartd exits 0 and the port is closed.
TEST_F(FrontE2e, SigtermLetsTheFrontFinishFirst) {
  launch(", \"--fault-token-delay\", \"0.1\"", 30);
  ready();
  const auto want = complete(kPrompts[0], 20);
  ASSERT_EQ(want.status, 200) << want.body;
  // The front writes its status on a tick: wait until it shows the first request answered, so that a stale
  // view cannot pass for the slow request below being in flight.
  json settled;
  ASSERT_TRUE(m_sup->wait_for([](const json& j) {
    const json r = j.value("front", json::object()).value("requests", json::object());
    return r.value("received", 0) >= 1 && r.value("received", 0) == r.value("answered", 0);
  }, 30, &settled)) << m_sup->log();
  const int64_t before = settled["front"]["requests"].value("received", 0);
  auto slow = std::async(std::launch::async, [this] { return complete(kPrompts[0], 20); });
  // The slow request is inside the front (and the engine) before the signal.
  ASSERT_TRUE(m_sup->wait_for([before](const json& j) {
    const json r = j.value("front", json::object()).value("requests", json::object());
    return r.value("received", 0) > before && r.value("received", 0) - r.value("answered", 0) >= 1;
  }, 30)) << m_sup->log();
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
  const auto got = slow.get();
  EXPECT_EQ(got.status, 200) << got.body << "\n" << m_sup->log();
  EXPECT_EQ(text_of(got), text_of(want));
  const std::string log = m_sup->log();
  const auto front_stop = log.find("stopping fastrestart-front");
  const auto front_gone = log.find("stopped (exit code 0)");
  const auto engine_stop = log.find("stopping the engine's process group");
  ASSERT_NE(front_stop, std::string::npos) << log;
  ASSERT_NE(front_gone, std::string::npos) << log;
  ASSERT_NE(engine_stop, std::string::npos) << log;
  EXPECT_LT(front_stop, front_gone) << log;
  EXPECT_LT(front_gone, engine_stop) << "the engine stopped before the front had finished: " << log;
  EXPECT_EQ(front_connect(m_port), ECONNREFUSED);
}

// A reload that changes [front] is refused, naming the key; the front keeps running.
TEST_F(FrontE2e, AReloadThatChangesTheFrontIsRefused) {
  launch();
  json st = ready();
  const int64_t front = front_of(st).value("pid", 0);
  const std::string path = m_dir / "t.toml";
  std::ifstream in(path);
  std::string toml((std::istreambuf_iterator<char>(in)), {});
  const auto at = toml.find("hold_s = 60");
  ASSERT_NE(at, std::string::npos) << toml;
  toml.replace(at, 11, "hold_s = 61");
  std::ofstream(path, std::ios::trunc) << toml;
  const auto r = test::run({FR_FASTRESTARTCTL_BIN, "--socket", m_dir / "ctl/t.ctl", "reload"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("front.hold_s 60 -> 61"), std::string::npos) << r.output;
  st = m_sup->status();
  EXPECT_EQ(front_of(st).value("pid", 0), front) << st.dump();
  EXPECT_EQ(complete(kPrompts[1]).status, 200);
  EXPECT_EQ(m_sup->stop(SIGTERM), 0) << m_sup->log();
}

}  // namespace
}  // namespace fr
