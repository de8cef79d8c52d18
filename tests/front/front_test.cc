// fastrestart-front end to end: the real front binary, handed a listening socket the test owns (as
// fastrestartd owns it) as fd 3 with LISTEN_FDS, in front of the real tiny engine, which the test kills
// with SIGKILL while requests are in flight. Every answer is compared with an uninterrupted run's.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/fd.h"
#include "engine_process.h"
#include "support/harness.h"

namespace fr::front {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using fr::te::test::Engine;
using fr::te::test::EngineStart;
using fr::te::test::tiny_checkpoint;

UniqueFd listen_any(uint16_t& port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd.get(), 128) != 0) std::abort();
  socklen_t len = sizeof a;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

// The real fastrestart-front on the test's socket (fd 3, LISTEN_FDS=1, LISTEN_PID its own pid). The socket
// stays the test's: a front killed with SIGKILL leaves it listening, and the next front takes it.
class Front {
 public:
  Front(int listen_fd, uint16_t upstream_port, std::vector<std::string> extra = {}) {
    m_status = m_dir / "status.json";
    m_log = m_dir / "front.log";
    std::vector<std::string> argv = {fr::test::binary(FR_FRONT_BIN, "fastrestart-front"), "--upstream",
                                     "127.0.0.1:" + std::to_string(upstream_port), "--status-file", m_status};
    argv.insert(argv.end(), extra.begin(), extra.end());
    m_pid = ::fork();
    if (m_pid == 0) {
      int log = ::open(m_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(log, 1);
      ::dup2(log, 2);
      // dup2 clears close-on-exec on the copy; a socket already at 3 has it cleared by hand.
      if (listen_fd == 3) ::fcntl(3, F_SETFD, 0);
      else ::dup2(listen_fd, 3);
      ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
      ::setenv("LISTEN_FDS", "1", 1);
      ::setenv("LISTEN_FDNAMES", "fastrestart-engine", 1);
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      ::execv(cargv[0], cargv.data());
      ::_exit(127);
    }
  }
  ~Front() { kill(SIGKILL); }
  void kill(int sig) {
    if (m_pid > 0) {
      ::kill(m_pid, sig);
      ::waitpid(m_pid, &m_wait_status, 0);
      m_pid = -1;
    }
  }
  // After kill(): the exit code, or 128 + the signal that ended it.
  int exit_code() const {
    return WIFEXITED(m_wait_status) ? WEXITSTATUS(m_wait_status) : 128 + WTERMSIG(m_wait_status);
  }
  // The front's counters once `pred` holds (or the last read after 10 s).
  json status(const std::function<bool(const json&)>& pred = [](const json&) { return true; }) const {
    json last;
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < until) {
      std::ifstream f(m_status);
      std::stringstream ss;
      ss << f.rdbuf();
      last = json::parse(ss.str(), nullptr, false);
      if (!last.is_discarded() && pred(last)) return last;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return last;
  }
  std::string log() const {
    std::ifstream f(m_log);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  fr::test::TempDir m_dir;
  std::string m_status, m_log;
  pid_t m_pid = -1;
  int m_wait_status = 0;
};

// Raw bytes to the front, and everything it answers until it closes (or 10 s).
std::string raw(uint16_t port, const std::string& bytes, bool close_after_send = false) {
  UniqueFd fd = fr::test::connect_loopback(port, 10);
  if (!fd) return "connect failed";
  if (::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) < 0) return "send failed";
  if (close_after_send) return "";
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd.get(), buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

std::string completion_body(const std::string& prompt, int max_tokens) {
  return json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}}.dump();
}

// What a client compares: the answer without its id and time, which name the engine process and second.
std::string comparable(const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "not JSON: " + body;
  j.erase("id");
  j.erase("created");
  return j.dump();
}

std::string prompt_of(int i) { return "request " + std::to_string(i) + " asks"; }

class FrontTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_listen = listen_any(m_port);
    m_engine_port = fr::test::free_port();
  }
  std::unique_ptr<Engine> start_engine(std::vector<std::string> args = {}) {
    auto e = std::make_unique<Engine>(m_checkpoint, args, EngineStart{{}, m_engine_port});
    EXPECT_TRUE(e->wait_ready(20)) << e->log();
    return e;
  }
  httplib::Result post(httplib::Client& c, const std::string& body) {
    return c.Post("/v1/completions", body, "application/json");
  }
  UniqueFd m_listen;
  uint16_t m_port = 0;
  uint16_t m_engine_port = 0;
  std::string m_checkpoint = tiny_checkpoint();
};

TEST_F(FrontTest, ForwardsOnKeepAliveConnections) {
  auto engine = start_engine();
  Front front(m_listen.get(), m_engine_port);
  httplib::Client direct("127.0.0.1", m_engine_port);
  httplib::Client c("127.0.0.1", m_port);
  c.set_keep_alive(true);
  c.set_read_timeout(10);
  for (int i = 0; i < 3; ++i) {
    auto want = post(direct, completion_body(prompt_of(i), 8));
    auto got = post(c, completion_body(prompt_of(i), 8));
    ASSERT_TRUE(got) << front.log();
    EXPECT_EQ(got->status, 200);
    EXPECT_EQ(comparable(got->body), comparable(want->body));
  }
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const auto st = front.status([](const json& j) { return j["requests"]["answered"] == 4; });
  EXPECT_EQ(st["requests"]["answered"], 4) << st.dump();
  EXPECT_EQ(st["connections"], 1) << "one keep-alive connection for all four";
  EXPECT_EQ(st["requests"]["held"], 0);
}

// The front's connections to the engine are kept alive: sequential requests, each from a client connection
// of its own, travel on the same upstream connection (the tiny engine's HTTP library closes one after 5
// requests, so 10 take at most 2), and the answers are the engine's own.
TEST_F(FrontTest, UpstreamConnectionsAreReused) {
  auto engine = start_engine();
  Front front(m_listen.get(), m_engine_port, {"--max-idle-connections", "16"});
  httplib::Client direct("127.0.0.1", m_engine_port);
  constexpr int kRequests = 10;
  for (int i = 0; i < kRequests; ++i) {
    httplib::Client c("127.0.0.1", m_port);
    c.set_keep_alive(false);
    c.set_read_timeout(10);
    auto got = post(c, completion_body(prompt_of(i), 4));
    ASSERT_TRUE(got) << front.log();
    EXPECT_EQ(got->status, 200);
    EXPECT_EQ(comparable(got->body), comparable(post(direct, completion_body(prompt_of(i), 4))->body));
  }
  const auto st = front.status([](const json& j) { return j["requests"]["answered"] == kRequests; });
  EXPECT_EQ(st["requests"]["answered"], kRequests) << st.dump();
  EXPECT_LE(st["upstream"]["connects"].get<int>(), 2) << st.dump();
  EXPECT_GE(st["upstream"]["connects"].get<int>(), 1) << st.dump();
  EXPECT_EQ(st["requests"]["resent"], 0) << st.dump();
}

// The default (--max-idle-connections 0): a connection per request, closed after it.
TEST_F(FrontTest, NoPoolOpensAConnectionPerRequest) {
  auto engine = start_engine();
  Front front(m_listen.get(), m_engine_port);
  httplib::Client c("127.0.0.1", m_port);
  c.set_read_timeout(10);
  for (int i = 0; i < 4; ++i) {
    auto got = post(c, completion_body(prompt_of(i), 4));
    ASSERT_TRUE(got) << front.log();
    EXPECT_EQ(got->status, 200);
  }
  const auto st = front.status([](const json& j) { return j["requests"]["answered"] == 4; });
  EXPECT_EQ(st["upstream"]["connects"], 4) << st.dump();
  EXPECT_EQ(st["upstream"]["idle"], 0) << st.dump();
}

// An engine whose kept-alive connection closes just as the front sends on it (its idle timeout crossing the
// request): the request goes again at once on a new connection, neither held nor counted re-sent. The
// engine here is a script on a real socket: it answers the first request, reads the second and closes
// without a byte, then answers on the next connection.
TEST_F(FrontTest, KeptAliveConnectionClosedUnderARequestIsSentAgainAtOnce) {
  uint16_t engine_port = 0;
  UniqueFd engine_listen = listen_any(engine_port);
  auto read_request = [](int fd) {
    std::string in;
    char buf[4096];
    while (in.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return std::string();
      in.append(buf, static_cast<size_t>(n));
    }
    return in;
  };
  auto answer = [](int fd, const std::string& body) {
    const std::string out = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    return ::send(fd, out.data(), out.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(out.size());
  };
  std::atomic<int> served{0};
  std::thread script([&] {
    UniqueFd first(::accept(engine_listen.get(), nullptr, nullptr));
    if (read_request(first.get()).empty() || !answer(first.get(), R"({"n":1})")) return;
    served = 1;
    // The second request: closed, not a byte answered. (Read first; on a machine so loaded that the front's
    // 1 s idle timeout closed the connection before the request, the request comes on the next one anyway.)
    read_request(first.get());
    first.reset();
    UniqueFd second(::accept(engine_listen.get(), nullptr, nullptr));
    if (read_request(second.get()).empty() || !answer(second.get(), R"({"n":2})")) return;
    served = 2;
  });
  Front front(m_listen.get(), engine_port, {"--max-idle-connections", "4"});
  httplib::Client c("127.0.0.1", m_port);
  c.set_read_timeout(10);
  auto a = c.Get("/v1/models");
  auto b = c.Get("/v1/models");
  script.join();
  ASSERT_TRUE(a) << front.log();
  ASSERT_TRUE(b) << front.log();
  EXPECT_EQ(a->body, R"({"n":1})");
  EXPECT_EQ(b->body, R"({"n":2})");
  EXPECT_EQ(served, 2);
  const auto st = front.status([](const json& j) { return j["requests"]["answered"] == 2; });
  EXPECT_EQ(st["upstream"]["connects"], 2) << st.dump();
  EXPECT_EQ(st["requests"]["held"], 0) << st.dump();
  EXPECT_EQ(st["requests"]["resent"], 0) << st.dump();
}

// An idle kept-alive connection is closed by the front after 1 s: an engine that gives each connection a
// thread gets it back.
TEST_F(FrontTest, IdleUpstreamConnectionIsClosedAfterASecond) {
  auto engine = start_engine();
  Front front(m_listen.get(), m_engine_port, {"--max-idle-connections", "4"});
  httplib::Client c("127.0.0.1", m_port);
  c.set_read_timeout(10);
  ASSERT_TRUE(post(c, completion_body(prompt_of(1), 4)));
  const auto st = front.status([](const json& j) { return j["requests"]["answered"] == 1 && j["upstream"]["idle"] == 0; });
  EXPECT_EQ(st["upstream"]["idle"], 0) << st.dump();
  EXPECT_EQ(st["upstream"]["connects"], 1) << st.dump();
  auto stats = httplib::Client("127.0.0.1", m_engine_port).Get("/stats");
  ASSERT_TRUE(stats);
  EXPECT_EQ(post(c, completion_body(prompt_of(2), 4))->status, 200);
  EXPECT_EQ(front.status([](const json& j) { return j["upstream"]["connects"] == 2; })["upstream"]["connects"], 2)
      << "the closed one is not reused";
}

// kill -9 of an engine while the pool holds connections to it: they are dropped, the next request is held
// until the next engine answers, and a SIGTERM afterwards ends the front (exit 0) with its pool closed.
TEST_F(FrontTest, PooledConnectionsToAKilledEngineAreDropped) {
  auto engine = start_engine();
  Front front(m_listen.get(), m_engine_port, {"--max-idle-connections", "4"});
  httplib::Client c("127.0.0.1", m_port);
  c.set_read_timeout(30);
  ASSERT_TRUE(post(c, completion_body(prompt_of(1), 4)));
  auto st = front.status([](const json& j) { return j["upstream"]["connects"] == 1; });
  EXPECT_EQ(st["upstream"]["connects"], 1) << st.dump();
  engine->signal(SIGKILL);
  ASSERT_TRUE(engine->wait_exit(10));
  st = front.status([](const json& j) { return j["upstream"]["idle"] == 0; });
  EXPECT_EQ(st["upstream"]["idle"], 0) << "the dead engine's connection left the pool: " << st.dump();
  engine.reset();
  std::thread restart([&] { engine = start_engine(); });
  auto got = post(c, completion_body(prompt_of(2), 4));
  restart.join();
  ASSERT_TRUE(got) << front.log();
  EXPECT_EQ(got->status, 200) << got->body;
  st = front.status([](const json& j) { return j["requests"]["answered"] == 2; });
  EXPECT_EQ(st["requests"]["answered"], 2) << st.dump();
  EXPECT_EQ(st["requests"]["failed"]["hold_timeout"], 0) << st.dump();
  c.stop();
  front.kill(SIGTERM);
  EXPECT_EQ(front.exit_code(), 0) << front.log();
}

// How many connections wait in the accept queue of the socket listening on 127.0.0.1:port (/proc/net/tcp:
// a listener's rx_queue is that count); -1 when no such listener.
int accept_queue_of(uint16_t port) {
  std::ifstream f("/proc/net/tcp");
  std::string line;
  std::getline(f, line);  // the header
  char want[16];
  std::snprintf(want, sizeof want, "0100007F:%04X", port);
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string sl, local, remote, state, queues;
    in >> sl >> local >> remote >> state >> queues;
    if (local == want && state == "0A") return static_cast<int>(std::stoul(queues.substr(queues.find(':') + 1), nullptr, 16));
  }
  return -1;
}

// When the engine comes back, the front re-sends every held request at once. On a port the tiny engine
// binds itself, that burst must wait in its accept queue, not overflow it: with httplib's queue of 5 the
// kernel dropped the rest, and requests re-sent on connections the engine never accepted waited until
// front.hold_s (hold_timeout at 256 clients in a benchmark whose front went to the engine's own port). The
// engine stopped (SIGSTOP) accepts nothing: all of 64 connections made meanwhile must be queued.
TEST_F(FrontTest, EngineOwnPortQueuesABurstOfConnections) {
  auto engine = start_engine();
  engine->signal(SIGSTOP);
  // Every thread stopped before the first connect: an accept thread still running would take some.
  const auto all_stopped = [pid = engine->pid()] {
    for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
      std::ifstream f(t.path() / "stat");
      std::string stat((std::istreambuf_iterator<char>(f)), {});
      const auto close = stat.rfind(')');
      if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'T') return false;
    }
    return true;
  };
  for (const auto until = Clock::now() + std::chrono::seconds(10); !all_stopped() && Clock::now() < until;)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(all_stopped());
  constexpr int kBurst = 64;
  std::vector<UniqueFd> conns;
  for (int i = 0; i < kBurst; ++i) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(m_engine_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);  // EINPROGRESS: the handshake goes on
    conns.push_back(std::move(fd));
  }
  int queued = accept_queue_of(m_engine_port);
  for (const auto until = Clock::now() + std::chrono::seconds(10); queued < kBurst && Clock::now() < until;
       queued = accept_queue_of(m_engine_port))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  engine->signal(SIGCONT);
  EXPECT_EQ(queued, kBurst) << "connections waiting for the stopped engine's accept";
}

// kill -9 with requests in flight: each is held, sent again to the next engine, and answered as an
// uninterrupted run answers it.
TEST_F(FrontTest, EngineKilledMidRequestEveryRequestAnsweredAsIfUninterrupted) {
  constexpr int kClients = 8;
  std::vector<std::string> want(kClients);
  {
    auto engine = start_engine();
    httplib::Client direct("127.0.0.1", m_engine_port);
    for (int i = 0; i < kClients; ++i) want[i] = comparable(post(direct, completion_body(prompt_of(i), 12))->body);
  }
  // Slow tokens keep the requests in the engine when it dies; spare worker threads answer /stats beside the
  // eight completions.
  auto engine = start_engine({"--fault-token-delay", "0.05", "--threads", "16"});
  Front front(m_listen.get(), m_engine_port, {"--hold-s", "30"});
  std::vector<std::string> got(kClients);
  std::vector<int> status(kClients, -1);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", m_port);
      c.set_read_timeout(30);
      if (auto r = post(c, completion_body(prompt_of(i), 12))) {
        status[i] = r->status;
        got[i] = comparable(r->body);
      }
    });
  // Wait until the engine holds requests, then kill it (a deadline, not a timing: on a loaded machine the
  // front and the clients' threads may take seconds to get the requests there).
  httplib::Client direct("127.0.0.1", m_engine_port);
  const auto until = Clock::now() + std::chrono::seconds(60);
  bool in_flight = false;
  while (!in_flight && Clock::now() < until) {
    auto r = direct.Get("/stats");
    in_flight = r && json::parse(r->body)["requests"]["in_flight"].get<int>() >= 2;
    if (!in_flight) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(in_flight) << "the engine never held two requests at once";
  engine->signal(SIGKILL);
  ASSERT_TRUE(engine->wait_exit(10));
  engine.reset();
  // The next engine answers 503 while it loads: the front holds the requests through that too.
  engine = start_engine();
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(status[i], 200) << "client " << i << "\n" << front.log();
    EXPECT_EQ(got[i], want[i]) << "client " << i;
  }
  const auto st = front.status([](const json& j) { return j["requests"]["answered"] == kClients; });
  EXPECT_GE(st["requests"]["held"].get<int>(), 2) << st.dump();
  EXPECT_GE(st["requests"]["resent"].get<int>(), 2) << st.dump();
  EXPECT_EQ(st["requests"]["held_now"], 0) << st.dump();
}

TEST_F(FrontTest, HeldPastHoldSecondsIs503NamingIt) {
  Front front(m_listen.get(), m_engine_port, {"--hold-s", "0.3"});  // no engine at all
  const auto out = raw(m_port, "POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\n"
                               "Content-Length: 2\r\nConnection: close\r\n\r\n{}");
  EXPECT_EQ(out.rfind("HTTP/1.1 503 ", 0), 0u) << out;
  EXPECT_NE(out.find("front.hold_s = 0.3 s"), std::string::npos) << out;
  const auto st = front.status([](const json& j) { return j["requests"]["failed"]["hold_timeout"] == 1; });
  EXPECT_EQ(st["requests"]["failed"]["hold_timeout"], 1) << st.dump();
  EXPECT_EQ(st["requests"]["held_now"], 0);
}

TEST_F(FrontTest, OneMoreThanMaxHeldRequestsIs503NamingIt) {
  Front front(m_listen.get(), m_engine_port, {"--hold-s", "30", "--max-held-requests", "1"});  // no engine
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
  UniqueFd keep(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(m_port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(keep.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_GT(::send(keep.get(), req.data(), req.size(), MSG_NOSIGNAL), 0);  // this one stays held
  front.status([](const json& j) { return j["requests"]["held_now"] == 1; });
  const auto out = raw(m_port, req.substr(0, req.find("\r\n\r\n")) + "\r\nConnection: close\r\n\r\n{}");
  EXPECT_EQ(out.rfind("HTTP/1.1 503 ", 0), 0u) << out;
  EXPECT_NE(out.find("front.max_held_requests = 1"), std::string::npos) << out;
  const auto st = front.status([](const json& j) { return j["requests"]["failed"]["too_many_held"] == 1; });
  EXPECT_EQ(st["requests"]["failed"]["too_many_held"], 1) << st.dump();
  EXPECT_EQ(st["requests"]["held_now"], 1) << st.dump();
}

TEST_F(FrontTest, ClientGoneWhileHeldIsDropped) {
  Front front(m_listen.get(), m_engine_port, {"--hold-s", "30"});
  raw(m_port, "POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", true);
  const auto st = front.status([](const json& j) { return j["requests"]["failed"]["client_gone"] == 1; });
  EXPECT_EQ(st["requests"]["failed"]["client_gone"], 1) << st.dump();
  EXPECT_EQ(st["requests"]["held_now"], 0) << st.dump();
  EXPECT_EQ(st["connections"], 0) << st.dump();
  // The engine that comes later never sees it.
  auto engine = start_engine();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto stats = json::parse(httplib::Client("127.0.0.1", m_engine_port).Get("/stats")->body);
  EXPECT_EQ(stats["requests"]["completions"].get<int>() + stats["requests"]["errors"].get<int>(), 0) << stats.dump();
}

TEST_F(FrontTest, BadRequestsAnsweredByTheFrontAlone) {
  auto engine = start_engine();
  Front front(m_listen.get(), m_engine_port, {"--max-body-bytes", "1000"});
  auto out = raw(m_port, "NOT HTTP AT ALL\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 400 ", 0), 0u) << out;
  EXPECT_NE(out.find("malformed HTTP request"), std::string::npos) << out;
  out = raw(m_port, "POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{");
  EXPECT_EQ(out.rfind("HTTP/1.1 413 ", 0), 0u) << out;
  EXPECT_NE(out.find("front.max_body_bytes = 1000"), std::string::npos) << out;
  out = raw(m_port, "POST /v1/completions HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
                    "Connection: close\r\n\r\n{}");
  EXPECT_EQ(out.rfind("HTTP/1.1 400 ", 0), 0u) << out;
  EXPECT_NE(out.find("application/json"), std::string::npos) << out;
  out = raw(m_port, "POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 9\r\n"
                    "Connection: close\r\n\r\n{\"prompt\"");
  EXPECT_EQ(out.rfind("HTTP/1.1 400 ", 0), 0u) << out;
  auto stats = json::parse(httplib::Client("127.0.0.1", m_engine_port).Get("/stats")->body);
  EXPECT_EQ(stats["requests"]["completions"].get<int>() + stats["requests"]["errors"].get<int>(), 0)
      << "the engine saw a bad request: " << stats.dump();
  const auto st = front.status([](const json& j) { return j["requests"]["rejected"].value("400", 0) == 3; });
  EXPECT_EQ(st["requests"]["rejected"]["400"], 3) << st.dump();
  EXPECT_EQ(st["requests"]["rejected"]["413"], 1) << st.dump();
}

// A streamed answer the engine cut after its first events: the client reads one well-formed chunked SSE
// stream whose end is an error event and [DONE]. The upstream is a real socket served by a thread that
// writes two events and resets the connection (the tiny engine does not stream).
TEST_F(FrontTest, StreamCutMidwayEndsWithAnErrorEvent) {
  uint16_t up_port = 0;
  UniqueFd up = listen_any(up_port);
  std::thread server([&] {
    UniqueFd c(::accept4(up.get(), nullptr, nullptr, SOCK_CLOEXEC));
    char buf[4096];
    std::string req;
    while (req.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = ::recv(c.get(), buf, sizeof buf, 0);
      if (n <= 0) return;
      req.append(buf, static_cast<size_t>(n));
    }
    const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    const std::string ev = "data: {\"id\":\"x\",\"choices\":[{\"text\":\"a\"}]}\n\n";
    std::string body = head;
    for (int i = 0; i < 2; ++i) {
      char h[16];
      std::snprintf(h, sizeof h, "%zx\r\n", ev.size());
      body += h + ev + "\r\n";
    }
    body += "5\r\ndata:";  // half an event, then the engine dies
    ::send(c.get(), body.data(), body.size(), MSG_NOSIGNAL);
    linger l{1, 0};
    ::setsockopt(c.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);  // close = RST, as a killed process's
  });
  Front front(m_listen.get(), up_port);
  httplib::Client c("127.0.0.1", m_port);
  c.set_read_timeout(10);
  auto r = c.Post("/v1/completions", R"({"prompt":"x","stream":true})", "application/json");
  server.join();
  ASSERT_TRUE(r) << front.log();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  const std::string ev = "data: {\"id\":\"x\",\"choices\":[{\"text\":\"a\"}]}\n\n";
  ASSERT_EQ(r->body.rfind(ev + ev + "data: {\"error\":", 0), 0u) << r->body;
  EXPECT_NE(r->body.find("cannot be continued"), std::string::npos) << r->body;
  EXPECT_TRUE(r->body.ends_with("}\n\ndata: [DONE]\n\n")) << r->body;
  const auto st = front.status([](const json& j) { return j["requests"]["failed"]["stream_interrupted"] == 1; });
  EXPECT_EQ(st["requests"]["failed"]["stream_interrupted"], 1) << st.dump();
}

// The front killed with SIGKILL: the socket stays listening where its owner holds it, connections made
// meanwhile wait in its queue, and the next front answers them.
TEST_F(FrontTest, FrontKilledNextFrontServesTheQueuedConnection) {
  auto engine = start_engine();
  auto front = std::make_unique<Front>(m_listen.get(), m_engine_port);
  httplib::Client c("127.0.0.1", m_port);
  c.set_read_timeout(10);
  ASSERT_TRUE(post(c, completion_body("before", 4)));
  front->kill(SIGKILL);
  std::string queued;
  std::thread t([&] {
    queued = raw(m_port, "POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nConnection: close\r\n"
                         "Content-Length: " + std::to_string(completion_body("after", 4).size()) + "\r\n\r\n" +
                         completion_body("after", 4));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  front = std::make_unique<Front>(m_listen.get(), m_engine_port);
  t.join();
  EXPECT_EQ(queued.rfind("HTTP/1.1 200 ", 0), 0u) << queued << front->log();
}

// ---- streams continued on the next engine ----

// The body of a chunked HTTP/1.1 answer (the front's streams are chunk-encoded); "" if `raw_answer` is not
// one whole chunked answer.
std::string dechunk(const std::string& raw_answer) {
  auto at = raw_answer.find("\r\n\r\n");
  if (at == std::string::npos || raw_answer.find("Transfer-Encoding: chunked") > at) return "";
  std::string body;
  size_t pos = at + 4;
  while (true) {
    const auto eol = raw_answer.find("\r\n", pos);
    if (eol == std::string::npos) return "";
    const size_t n = std::stoul(raw_answer.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) return raw_answer.compare(eol, 4, "\r\n\r\n") == 0 ? body : "";
    body += raw_answer.substr(eol + 2, n);
    pos = eol + 2 + n + 2;
  }
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

// POSTs a streamed completion to the front and reads the answer to its end; `at_events[k]` runs once the
// client has read k events ("data:" lines) of the stream.
std::string stream_through(uint16_t port, const std::string& body,
                           std::vector<std::pair<size_t, std::function<void()>>> at_events = {},
                           const std::string& path = "/v1/completions") {
  UniqueFd fd = fr::test::connect_loopback(port, 60);
  if (!fd) return "connect failed";
  const std::string req = "POST " + path + " HTTP/1.1\r\nContent-Type: application/json\r\nConnection: close\r\n"
                          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  if (::send(fd.get(), req.data(), req.size(), MSG_NOSIGNAL) < 0) return "send failed";
  std::string out;
  char buf[4096];
  size_t next = 0;
  for (ssize_t n; (n = ::recv(fd.get(), buf, sizeof buf, 0)) > 0;) {
    out.append(buf, static_cast<size_t>(n));
    while (next < at_events.size() && count_of(out, "data:") >= at_events[next].first) at_events[next++].second();
  }
  return out;
}

// The "id" and "created" of a stream's first chunk, as they appear in its bytes.
std::pair<std::string, std::string> id_and_created(const std::string& stream) {
  const auto data = stream.substr(stream.find("data: ") + 6, stream.find("\n\n") - stream.find("data: ") - 6);
  auto j = json::parse(data);
  return {"\"id\":" + j["id"].dump(), "\"created\":" + j["created"].dump()};
}

// `want` (an uninterrupted stream) with its id and created replaced by `got`'s: what `got` must equal byte
// for byte, the spliced stream keeping the first engine's id and created throughout.
std::string as_if_from(const std::string& want, const std::string& got) {
  auto [wid, wcreated] = id_and_created(want);
  auto [gid, gcreated] = id_and_created(got);
  std::string out = want;
  for (auto [from, to] : {std::pair{wid, gid}, std::pair{wcreated, gcreated}})
    for (size_t at = out.find(from); at != std::string::npos; at = out.find(from, at + to.size()))
      out.replace(at, from.size(), to);
  return out;
}

std::string stream_body(const json& prompt, int max_tokens, json extra = json::object()) {
  json b = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"stream", true}, {"temperature", 0}};
  b.update(extra);
  return b.dump();
}

class FrontStreamTest : public FrontTest {
 protected:
  // Kills the engine (SIGKILL) and starts the next one on the same port.
  void restart_engine() {
    m_engine->signal(SIGKILL);
    ASSERT_TRUE(m_engine->wait_exit(10));
    m_engine.reset();
    m_engine = start_engine({"--fault-token-delay", "0.03"});
  }
  std::unique_ptr<Engine> m_engine;
};

// kill -9 mid-stream: the client reads one stream, byte for byte the uninterrupted one (its text, its
// token ids, one usage event counting the original prompt and every token, one [DONE]).
TEST_F(FrontStreamTest, KilledMidStreamContinuesByteForByte) {
  const std::vector<std::string> bodies = {
      stream_body("the stream that survives", 24, {{"stream_options", {{"include_usage", true}}}}),
      stream_body({116, 111, 107, 101, 110, 115}, 20, {{"return_token_ids", true}, {"stream_options", json::object()}}),
  };
  m_engine = start_engine({"--fault-token-delay", "0.03"});
  Front front(m_listen.get(), m_engine_port, {"--hold-s", "30"});
  std::vector<std::string> want;
  for (const auto& b : bodies) want.push_back(dechunk(stream_through(m_port, b)));
  for (size_t i = 0; i < bodies.size(); ++i) {
    ASSERT_FALSE(want[i].empty());
    const auto raw_got = stream_through(m_port, bodies[i], {{6, [&] { restart_engine(); }}});
    const auto got = dechunk(raw_got);
    ASSERT_FALSE(got.empty()) << raw_got << front.log();
    EXPECT_EQ(got, as_if_from(want[i], got)) << "request " << i;
    EXPECT_EQ(count_of(got, "data: [DONE]"), 1u);
    EXPECT_EQ(count_of(got, "\"usage\":{"), 1u);
    EXPECT_EQ(got.find("error"), std::string::npos) << got;
  }
  EXPECT_NE(want[1].find("\"token_ids\":[1"), std::string::npos) << "the client asked for token ids: " << want[1];
  EXPECT_EQ(want[0].find("\"token_ids\":["), std::string::npos) << "the client did not: " << want[0];
  const auto st = front.status([](const json& j) { return j["requests"]["continued"] == 2; });
  EXPECT_EQ(st["requests"]["continued"], 2) << st.dump();
  EXPECT_EQ(st["requests"]["failed"]["stream_interrupted"], 0) << st.dump();
}

// A second kill -9 while the continuation streams: continued again, still one exact stream.
TEST_F(FrontStreamTest, SecondDeathDuringTheContinuationContinuesAgain) {
  const auto body = stream_body("twice", 30, {{"stream_options", {{"include_usage", true}}}});
  m_engine = start_engine({"--fault-token-delay", "0.03"});
  Front front(m_listen.get(), m_engine_port, {"--hold-s", "30"});
  const auto want = dechunk(stream_through(m_port, body));
  const auto got = dechunk(stream_through(m_port, body, {{5, [&] { restart_engine(); }}, {14, [&] { restart_engine(); }}}));
  ASSERT_FALSE(got.empty()) << front.log();
  EXPECT_EQ(got, as_if_from(want, got));
  const auto st = front.status([](const json& j) { return j["requests"]["continued"] == 1; });
  EXPECT_EQ(st["requests"]["continued"], 1) << st.dump();
  EXPECT_GE(st["requests"]["resent"].get<int>(), 2) << st.dump();
  EXPECT_EQ(st["requests"]["held_now"], 0) << st.dump();
}

// A stream held before its head (no engine yet), then answered, then cut by kill -9 mid-way: held again
// and continued, byte for byte the uninterrupted stream. Its first hold must not outlive the engine that
// answered it: the second death holds it afresh and the next engine continues it.
TEST_F(FrontStreamTest, HeldBeforeItsHeadThenKilledMidStreamIsContinued) {
  const auto body = stream_body("the stream that survives", 24, {{"stream_options", {{"include_usage", true}}}});
  Front front(m_listen.get(), m_engine_port, {"--hold-s", "30"});  // no engine yet
  std::mutex engine_mu;  // m_engine: set here, restarted from the client's thread
  std::string raw_got;
  std::thread client([&] {
    raw_got = stream_through(m_port, body, {{6, [&] {
                                               std::lock_guard l(engine_mu);
                                               restart_engine();
                                             }}});
  });
  const auto held = front.status([](const json& j) { return j["requests"]["held_now"] == 1; });
  EXPECT_EQ(held["requests"]["held_now"], 1) << held.dump();
  {
    std::lock_guard l(engine_mu);
    m_engine = start_engine({"--fault-token-delay", "0.03"});
  }
  client.join();
  const auto got = dechunk(raw_got);
  ASSERT_FALSE(got.empty()) << raw_got << front.log();
  const auto want = dechunk(stream_through(m_port, body));
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(got, as_if_from(want, got));
  EXPECT_EQ(count_of(got, "data: [DONE]"), 1u);
  EXPECT_EQ(got.find("error"), std::string::npos) << got;
  const auto st = front.status([](const json& j) { return j["requests"]["continued"] == 1; });
  EXPECT_EQ(st["requests"]["continued"], 1) << st.dump() << got << front.log();
  EXPECT_EQ(st["requests"]["held"], 1) << "held once, counted once: " << st.dump();
  EXPECT_EQ(st["requests"]["held_now"], 0) << st.dump();
  EXPECT_EQ(st["requests"]["failed"]["hold_timeout"], 0) << st.dump();
}

// A stream the front cannot continue exactly (guided decoding here; the tiny engine ignores the field)
// ends with an error event naming why, and [DONE].
TEST_F(FrontStreamTest, NotContinuableEndsWithAnErrorNamingTheReason) {
  const auto body = stream_body("guided", 24, {{"guided_regex", "[a-z]+"}});
  m_engine = start_engine({"--fault-token-delay", "0.03"});
  Front front(m_listen.get(), m_engine_port, {"--hold-s", "30"});
  const auto got = dechunk(stream_through(m_port, body, {{4, [&] { restart_engine(); }}}));
  ASSERT_FALSE(got.empty()) << front.log();
  EXPECT_NE(got.find("data: {\"error\":"), std::string::npos) << got;
  EXPECT_NE(got.find("guided decoding (guided_regex) is not continued [guided]"), std::string::npos) << got;
  EXPECT_TRUE(got.ends_with("}\n\ndata: [DONE]\n\n")) << got;
  EXPECT_EQ(got.find("\"token_ids\":["), std::string::npos) << "forwarded as the client wrote it";
  const auto st = front.status([](const json& j) { return j["requests"]["failed"]["stream_interrupted"] == 1; });
  EXPECT_EQ(st["requests"]["not_continued"]["guided"], 1) << st.dump();
  EXPECT_EQ(st["requests"]["continued"], 0) << st.dump();
}

// The content a chat stream's client reads: its chunks' delta.content joined.
std::string chat_content(const std::string& stream) {
  std::string out;
  for (size_t at = stream.find("data: {"); at != std::string::npos; at = stream.find("data: {", at + 1)) {
    auto j = json::parse(stream.substr(at + 6, stream.find("\n\n", at) - at - 6), nullptr, false);
    if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) continue;
    const auto& d = j["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string()) out += d["content"].get<std::string>();
  }
  return out;
}

// kill -9 mid-way through a chat stream: the front sends the messages again with the content the client
// has as the assistant's message, continued (continue_final_message); the client reads one stream, byte
// for byte the uninterrupted one: one role chunk, one id, one usage event, one [DONE], the same content.
// The checkpoint answers in printable ASCII (gen --printable): a chat is continued as text, and the test
// weights' usual bytes that are not UTF-8 reach a client as U+FFFD, which cannot be sent back as they were.
TEST_F(FrontStreamTest, ChatKilledMidStreamContinuesTheAssistantMessage) {
  m_checkpoint = fr::te::test::printable_checkpoint();
  const std::vector<json> bodies = {
      {{"messages", {{{"role", "system"}, {"content", "answer at length"}}, {{"role", "user"}, {"content", "go on"}}}},
       {"max_completion_tokens", 24},
       {"stream", true},
       {"temperature", 0},
       {"stream_options", {{"include_usage", true}}}},
      // A request that continues its own assistant message: the text sent is appended to it.
      {{"messages", {{{"role", "user"}, {"content", "a story"}}, {{"role", "assistant"}, {"content", "Once"}}}},
       {"max_tokens", 20},
       {"stream", true},
       {"add_generation_prompt", false},
       {"continue_final_message", true}},
  };
  m_engine = start_engine({"--fault-token-delay", "0.03"});
  Front front(m_listen.get(), m_engine_port, {"--hold-s", "30"});
  for (size_t i = 0; i < bodies.size(); ++i) {
    const auto want = dechunk(stream_through(m_port, bodies[i].dump(), {}, "/v1/chat/completions"));
    ASSERT_FALSE(want.empty());
    ASSERT_NE(want.find("\"object\":\"chat.completion.chunk\""), std::string::npos) << want;
    const auto raw_got = stream_through(m_port, bodies[i].dump(), {{6, [&] { restart_engine(); }}}, "/v1/chat/completions");
    const auto got = dechunk(raw_got);
    ASSERT_FALSE(got.empty()) << raw_got << front.log();
    EXPECT_EQ(chat_content(got), chat_content(want)) << "request " << i;
    EXPECT_GE(chat_content(got).size(), 10u) << got;
    EXPECT_EQ(got, as_if_from(want, got)) << "request " << i;
    EXPECT_EQ(count_of(got, "\"role\":\"assistant\""), 1u) << got;
    EXPECT_EQ(count_of(got, "data: [DONE]"), 1u);
    EXPECT_EQ(count_of(got, "\"usage\":{"), i == 0 ? 1u : 0u);
    EXPECT_EQ(got.find("error"), std::string::npos) << got;
  }
  const auto st = front.status([](const json& j) { return j["requests"]["continued"] == 2; });
  EXPECT_EQ(st["requests"]["continued"], 2) << st.dump();
  EXPECT_EQ(st["requests"]["failed"]["stream_interrupted"], 0) << st.dump();
}

// ---- what the engine is told on a continuation ----

// A scripted engine on a socket of the test's (the tiny engine neither records what it was sent nor
// streams token ids chosen by the test): each connection's request, head and body, is recorded and
// answered by the next script: a stream's head and events, then either the stream's end or a reset after
// them, as a killed engine's connection ends.
class ScriptedEngine {
 public:
  struct Answer {
    std::vector<std::string> events;
    bool killed;  // reset after the events (else the stream ends)
  };
  explicit ScriptedEngine(std::vector<Answer> answers) : m_listen(listen_any(m_port)) {
    m_thread = std::thread([this, answers = std::move(answers)] {
      for (const auto& a : answers)
        if (!serve(a)) return;
    });
  }
  ~ScriptedEngine() { join(); }
  uint16_t port() const { return m_port; }
  // Every request received, once every script was served (or a connection failed).
  const std::vector<std::string>& requests() {
    join();
    return m_requests;
  }

 private:
  void join() {
    if (m_thread.joinable()) m_thread.join();
  }
  bool serve(const Answer& a) {
    pollfd p{m_listen.get(), POLLIN, 0};
    if (::poll(&p, 1, 20000) != 1) return false;
    UniqueFd c(::accept4(m_listen.get(), nullptr, nullptr, SOCK_CLOEXEC));
    std::string req = read_request(c.get());
    if (req.empty()) return false;
    m_requests.push_back(std::move(req));
    std::string out = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (const auto& ev : a.events) {
      char h[16];
      std::snprintf(h, sizeof h, "%zx\r\n", ev.size());
      out += h + ev + "\r\n";
    }
    if (!a.killed) out += "0\r\n\r\n";
    ::send(c.get(), out.data(), out.size(), MSG_NOSIGNAL);
    if (a.killed) {
      linger l{1, 0};
      ::setsockopt(c.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);  // close = RST, as a killed process's
    }
    return true;
  }
  // One request's bytes, head and Content-Length body (the front frames every request by its length).
  static std::string read_request(int fd) {
    std::string req;
    char buf[4096];
    size_t want = std::string::npos;
    while (req.size() < want) {
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return "";
      req.append(buf, static_cast<size_t>(n));
      const auto end = req.find("\r\n\r\n");
      if (want == std::string::npos && end != std::string::npos) {
        std::string head = req.substr(0, end);
        for (auto& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        const auto cl = head.find("\r\ncontent-length:");
        want = end + 4 + (cl == std::string::npos ? 0 : std::stoul(head.substr(cl + 17)));
      }
    }
    return req;
  }

  uint16_t m_port = 0;
  UniqueFd m_listen;
  std::thread m_thread;
  std::vector<std::string> m_requests;
};

// The values of a request's header lines named `name` (any case).
std::vector<std::string> header_values(const std::string& request, const std::string& name) {
  std::vector<std::string> out;
  const std::string head = request.substr(0, request.find("\r\n\r\n"));
  for (size_t at = head.find("\r\n"); at != std::string::npos; at = head.find("\r\n", at + 2)) {
    const auto eol = std::min(head.find("\r\n", at + 2), head.size());
    const std::string line = head.substr(at + 2, eol - at - 2);
    const auto colon = line.find(':');
    if (colon == std::string::npos || colon != name.size()) continue;
    const auto same = [](char x, char y) {
      return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
    };
    if (!std::equal(name.begin(), name.end(), line.begin(), same)) continue;
    const auto value = line.find_first_not_of(' ', colon + 1);
    out.push_back(value == std::string::npos ? "" : line.substr(value));
  }
  return out;
}

json body_of_request(const std::string& request) {
  return json::parse(request.substr(request.find("\r\n\r\n") + 4), nullptr, false);
}

// A completion chunk as vLLM sends it with return_token_ids; `ids` null: an engine that gives none.
std::string completion_chunk(const std::string& text, const json& ids, const json& prompt_ids = nullptr,
                             const char* finish = nullptr) {
  json c = {{"index", 0}, {"text", text}, {"finish_reason", finish ? json(finish) : json(nullptr)},
            {"prompt_token_ids", prompt_ids}};
  if (!ids.is_null()) c["token_ids"] = ids;
  return "data: " + json{{"id", "cmpl-1"}, {"object", "text_completion"}, {"created", 7}, {"model", "m"},
                         {"choices", json::array({c})}}.dump() + "\n\n";
}

std::string chat_chunk(const std::string& content, bool role = false, const char* finish = nullptr) {
  json delta = {{"content", content}};
  if (role) delta["role"] = "assistant";
  json c = {{"index", 0}, {"delta", delta}, {"finish_reason", finish ? json(finish) : json(nullptr)}};
  return "data: " + json{{"id", "chat-1"}, {"object", "chat.completion.chunk"}, {"created", 7}, {"model", "m"},
                         {"choices", json::array({c})}}.dump() + "\n\n";
}

// POSTs `body` to the front with `headers` (whole lines) and reads the answer to its end.
std::string post_raw(uint16_t port, const std::string& path, const std::string& body, const std::string& headers) {
  return raw(port, "POST " + path + " HTTP/1.1\r\nContent-Type: application/json\r\nConnection: close\r\n" + headers +
                       "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
}

constexpr const char* kGenerated = "Fastrestart-Generated-Tokens";

// A completion continued by token ids tells the engine how many ids at the end of its prompt were generated
// for it (every id sent, over both deaths); the first attempt tells nothing, and the client's own header of
// that name reaches the engine on no attempt, while its other headers do.
TEST_F(FrontTest, ContinuationByTokenIdsTellsTheEngineHowManyItGenerated) {
  ScriptedEngine engine({
      {{completion_chunk("a", {10}, {5, 6, 7}), completion_chunk("bc", {11, 12})}, true},
      {{completion_chunk("d", {13}, {5, 6, 7, 10, 11, 12})}, true},
      {{completion_chunk("e", {14}, {5, 6, 7, 10, 11, 12, 13}, "length"), "data: [DONE]\n\n"}, false},
  });
  Front front(m_listen.get(), engine.port(), {"--hold-s", "30"});
  const auto body = stream_body({5, 6, 7}, 5);
  const auto got = dechunk(post_raw(m_port, "/v1/completions", body,
                                    "fastrestart-generated-tokens: 99\r\nX-Client-Trace: t1\r\n"));
  ASSERT_FALSE(got.empty()) << front.log();
  EXPECT_EQ(got.find("error"), std::string::npos) << got;
  EXPECT_EQ(count_of(got, "data: [DONE]"), 1u) << got;
  const auto& reqs = engine.requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(header_values(reqs[0], kGenerated), std::vector<std::string>{}) << "the first attempt: " << reqs[0];
  EXPECT_EQ(header_values(reqs[1], kGenerated), std::vector<std::string>{"3"}) << reqs[1];
  EXPECT_EQ(body_of_request(reqs[1])["prompt"], json({5, 6, 7, 10, 11, 12}));
  EXPECT_EQ(header_values(reqs[2], kGenerated), std::vector<std::string>{"4"}) << reqs[2];
  EXPECT_EQ(body_of_request(reqs[2])["prompt"], json({5, 6, 7, 10, 11, 12, 13}));
  for (const auto& r : reqs) EXPECT_EQ(header_values(r, "x-client-trace"), std::vector<std::string>{"t1"}) << r;
}

// A continuation as text (an engine without token ids) or a chat's (always text) does not say how many of
// its prompt's tokens were generated: the engine tokenizes the joined text itself. The client's header of
// that name is not forwarded either.
TEST_F(FrontTest, TextAndChatContinuationsTellTheEngineNoCount) {
  struct Case {
    const char* path;
    std::string body;
    std::vector<std::string> first, rest;
  } cases[] = {
      {"/v1/completions", stream_body("hi", 6),
       {completion_chunk("a", nullptr, nullptr), completion_chunk("b", nullptr)},
       {completion_chunk("c", nullptr, nullptr, "length"), "data: [DONE]\n\n"}},
      {"/v1/chat/completions",
       json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 6}, {"stream", true}}.dump(),
       {chat_chunk("", true), chat_chunk("He"), chat_chunk("l")},
       {chat_chunk("", true), chat_chunk("lo", false, "length"), "data: [DONE]\n\n"}},
  };
  for (const auto& c : cases) {
    ScriptedEngine engine({{c.first, true}, {c.rest, false}});
    Front front(m_listen.get(), engine.port(), {"--hold-s", "30"});
    const auto got = dechunk(post_raw(m_port, c.path, c.body, "Fastrestart-Generated-Tokens: 2\r\n"));
    ASSERT_FALSE(got.empty()) << c.path << front.log();
    EXPECT_EQ(got.find("error"), std::string::npos) << got;
    const auto& reqs = engine.requests();
    ASSERT_EQ(reqs.size(), 2u) << c.path;
    for (const auto& r : reqs) EXPECT_EQ(header_values(r, kGenerated), std::vector<std::string>{}) << c.path << r;
    const json next = body_of_request(reqs[1]);
    if (next.contains("prompt")) EXPECT_EQ(next["prompt"], "hiab") << "continued as text";
    else EXPECT_EQ(next["messages"].back()["content"], "Hel") << "continued as text";
    front.kill(SIGKILL);
  }
}

}  // namespace
}  // namespace fr::front
