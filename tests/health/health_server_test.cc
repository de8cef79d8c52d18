// HealthServer through a real httplib::Client: every endpoint in every lifecycle state.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>
#include <stdexcept>
#include <string>

#include "exposition_check.h"
#include "common/fd.h"
#include "health/health_server.h"

namespace fr::health {
namespace {

using nlohmann::json;

// A status the test can change while the server runs.
class CannedStatus {
 public:
  explicit CannedStatus(json j) : m_json(std::move(j)) {}
  void set(json j) {
    std::lock_guard lock(m_mutex);
    m_json = std::move(j);
  }
  void fail(bool on) {
    std::lock_guard lock(m_mutex);
    m_throw = on;
  }
  Source source() {
    return Source{[this] {
      std::lock_guard lock(m_mutex);
      if (m_throw) throw std::runtime_error("the loop did not answer");
      return m_json;
    }};
  }

 private:
  std::mutex m_mutex;
  json m_json;
  bool m_throw = false;
};

json status_in(const std::string& state, bool reloading = false) {
  return {{"name", "m"},
          {"state", state},
          {"reload_in_progress", reloading},
          {"restarts", {{"crash", 1}}},
          {"daemons", {{{"gpu", "0"}, {"state", "ready"}, {"held_bytes", 10}}}}};
}

struct Fixture : ::testing::Test {
  CannedStatus canned{status_in("ready")};
  std::unique_ptr<HealthServer> server;
  std::unique_ptr<httplib::Client> client;
  void SetUp() override {
    auto s = HealthServer::start("127.0.0.1:0", canned.source());
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    server = std::move(*s);
    ASSERT_NE(server->port(), 0);
    client = std::make_unique<httplib::Client>("127.0.0.1", server->port());
  }
  // The status code and the parsed JSON body of GET path.
  std::pair<int, json> get(const std::string& path) {
    auto r = client->Get(path.c_str());
    if (!r) return {-1, nullptr};
    return {r->status, json::parse(r->body, nullptr, false)};
  }
};

using HealthServerTest = Fixture;

struct StateCase {
  std::string state;
  bool reloading;
  std::string ready_state;  // what /ready reports
};

class EveryState : public Fixture, public ::testing::WithParamInterface<StateCase> {};

TEST_P(EveryState, EndpointsAnswerForTheState) {
  const auto& c = GetParam();
  canned.set(status_in(c.state, c.reloading));
  const bool ready = c.state == "ready";
  const bool supervisor_down = c.state == "failed";

  auto [health_code, health] = get("/health");
  EXPECT_EQ(health_code, supervisor_down ? 503 : 200) << health;
  EXPECT_EQ(health["status"], supervisor_down ? "down" : "ok");

  auto [ready_code, body] = get("/ready");
  EXPECT_EQ(ready_code, ready ? 200 : 503);
  EXPECT_EQ(body["state"], c.ready_state);

  auto [status_code, status] = get("/status");
  EXPECT_EQ(status_code, 200);
  EXPECT_EQ(status, status_in(c.state, c.reloading));

  auto r = client->Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
  EXPECT_TRUE(testing::check_exposition(r->body).empty()) << r->body;
  EXPECT_NE(r->body.find("fastrestart_engine_up " + std::string(ready ? "1" : "0") + "\n"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Lifecycle, EveryState,
                         ::testing::Values(StateCase{"loading", false, "loading"},
                                           StateCase{"starting", false, "starting"},
                                           StateCase{"ready", false, "ready"},
                                           StateCase{"draining", false, "restarting"},
                                           StateCase{"backoff", false, "backoff"},
                                           StateCase{"held", false, "held"},
                                           StateCase{"stopping", false, "stopping"},
                                           StateCase{"failed", false, "failed"},
                                           StateCase{"draining", true, "reloading"},
                                           StateCase{"starting", true, "reloading"}),
                         [](const auto& p) { return p.param.state + (p.param.reloading ? "_reloading" : ""); });

TEST_F(HealthServerTest, ADeadDaemonTakesHealthDownWhileReadyFollowsTheState) {
  json s = status_in("ready");
  s["daemons"].push_back({{"gpu", "1"}, {"state", "dead"}, {"error", ""}});
  canned.set(s);
  auto [code, body] = get("/health");
  EXPECT_EQ(code, 503);
  EXPECT_EQ(body, json::parse(R"({"status":"down","down":["daemon 1: dead"]})"));
  EXPECT_EQ(get("/ready").first, 200);
  s["state"] = "backoff";
  canned.set(s);
  EXPECT_EQ(get("/ready").first, 503);
}

TEST_F(HealthServerTest, LoadingDaemonsAndNoDaemonsAreHealthy) {
  json s = status_in("loading");
  s["daemons"][0]["state"] = "loading";
  canned.set(s);
  EXPECT_EQ(get("/health").first, 200);
  s.erase("daemons");
  canned.set(s);
  EXPECT_EQ(get("/health").first, 200);
}

TEST_F(HealthServerTest, AThrowingSourceIsDown) {
  canned.fail(true);
  auto [code, body] = get("/health");
  EXPECT_EQ(code, 503);
  EXPECT_EQ(body["status"], "down");
  EXPECT_EQ(body["down"], json::array({"supervisor: not answering"}));
  EXPECT_EQ(body["error"], "the loop did not answer");
  EXPECT_EQ(get("/ready").first, 503);
  EXPECT_EQ(get("/status").first, 503);
  EXPECT_EQ(get("/metrics").first, 200);  // build_info and zeros: Prometheus still sees the target
}

TEST_F(HealthServerTest, ANullStatusIsDown) {
  canned.set(nullptr);
  EXPECT_EQ(get("/health").first, 503);
  EXPECT_EQ(get("/ready").first, 503);
}

TEST_F(HealthServerTest, InvalidUtf8InTheStatusStillServes) {
  json s = status_in("backoff");
  s["status_text"] = std::string("engine said \xff");
  canned.set(s);
  EXPECT_EQ(get("/status").first, 200);
  EXPECT_EQ(get("/ready").first, 503);
}

TEST_F(HealthServerTest, StopsWithAKeepAliveConnectionOpen) {
  client->set_keep_alive(true);
  EXPECT_EQ(get("/health").first, 200);
  server.reset();  // must join without waiting for the client to hang up
  EXPECT_EQ(get("/health").first, -1);
}

TEST_F(HealthServerTest, UnknownPathsAre404Json) {
  auto [code, body] = get("/nope");
  EXPECT_EQ(code, 404);
  EXPECT_EQ(body["error"], "not found");
  auto r = client->Post("/health", "", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_GE(r->status, 400);
  EXPECT_FALSE(json::parse(r->body, nullptr, false).is_discarded());
}

TEST(HealthServerStart, BadListenStringsAreErrorsNamingTheAddress) {
  for (const std::string listen : {"nohost", "1.2.3.4:99999", "127.0.0.1:x", ":80", "127.0.0.1:", "::1:80"}) {
    auto s = HealthServer::start(listen, Source{[] { return json::object(); }});
    ASSERT_FALSE(s.ok()) << listen;
    EXPECT_NE(s.error().message.find("'" + listen + "'"), std::string::npos) << s.error().message;
  }
}

TEST(HealthServerStart, BindFailureNamesTheAddressAndWhy) {
  auto first = HealthServer::start("127.0.0.1:0", Source{[] { return json::object(); }});
  ASSERT_TRUE(first.ok());
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = HealthServer::start(taken, Source{[] { return json::object(); }});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().message.find(taken), std::string::npos) << second.error().message;
  EXPECT_NE(second.error().message.find("in use"), std::string::npos) << second.error().message;
}

TEST(HealthServerStart, UnresolvableHostIsAnError) {
  auto s = HealthServer::start("no-such-host.invalid:0", Source{[] { return json::object(); }});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("no-such-host.invalid:0"), std::string::npos) << s.error().message;
}

TEST(HealthServerStart, Ipv6LoopbackInBrackets) {
  auto s = HealthServer::start("[::1]:0", Source{[] { return json::object(); }});
  if (!s.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << s.error().message;
  httplib::Client c("::1", (*s)->port());
  auto r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// A TCP connection to 127.0.0.1:port from the loopback address `from` (127.0.0.2, ...: another client host).
UniqueFd connect_from(const std::string& from, uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in src{};
  src.sin_family = AF_INET;
  inet_pton(AF_INET, from.c_str(), &src.sin_addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) return {};
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) return {};
  return fd;
}

// True when the server closed the connection (EOF or reset); waits for it, with a guard against hanging.
bool closed_by_server(int fd) {
  timeval guard{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof guard);
  char c;
  const ssize_t n = ::recv(fd, &c, 1, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

// Still open: nothing to read and no EOF.
bool still_open(int fd) {
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// A probe as a kubelet sends it: a fresh connection and a 2 s timeout.
int probe(uint16_t port, const char* path) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(2, 0);
  c.set_read_timeout(2, 0);
  auto r = c.Get(path);
  return r ? r->status : -1;
}

// The slowloris attack: 200 connections from four other hosts, each sending its request line one byte a
// second, never finishing it. The probes keep answering within their 2 s timeout all along, and the slow
// connections are held, not refused (below the connection limit, before the request deadline).
TEST(HealthServerSlowClients, ProbesAnswerWhile200ConnectionsTrickleARequestLine) {
  CannedStatus canned{status_in("ready")};
  Options o;
  o.request_deadline_s = 120;  // this test is about the slots, not the deadline
  auto s = HealthServer::start("127.0.0.1:0", canned.source(), o);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  const uint16_t port = (*s)->port();
  std::vector<UniqueFd> slow;
  for (int i = 0; i < 200; ++i) {
    slow.push_back(connect_from("127.0.0." + std::to_string(2 + i % 4), port));
    ASSERT_TRUE(slow.back()) << "connection " << i << ": " << std::strerror(errno);
  }
  const std::string line = "GET /health HTTP/1.1\r\n";
  for (size_t sent = 0; sent < 8; ++sent) {
    for (auto& fd : slow) ASSERT_EQ(::send(fd.get(), &line[sent], 1, MSG_NOSIGNAL), 1);
    EXPECT_EQ(probe(port, "/health"), 200) << "after " << sent + 1 << " bytes";
    EXPECT_EQ(probe(port, "/ready"), 200) << "after " << sent + 1 << " bytes";
    std::this_thread::sleep_for(std::chrono::seconds(1));  // the attack's pace: one byte a second
  }
  int open = 0;
  for (auto& fd : slow) open += still_open(fd.get());
  EXPECT_EQ(open, 200);
}

// More stalled half-requests than the connection limit, from the prober's own address (on a node, any
// process shares the kubelet's address): every probe still answers, each evicting the oldest stalled one.
TEST(HealthServerSlowClients, ProbesAnswerWhileMoreThanTheLimitOfStalledConnectionsShareTheirAddress) {
  CannedStatus canned{status_in("ready")};
  Options o;  // the defaults: 256 connections, 5 s to a whole request
  auto s = HealthServer::start("127.0.0.1:0", canned.source(), o);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  const uint16_t port = (*s)->port();
  std::vector<UniqueFd> stalled;
  for (unsigned i = 0; i < o.connection_limit + 64; ++i) {
    stalled.push_back(connect_from("127.0.0.1", port));
    ASSERT_TRUE(stalled.back()) << "connection " << i << ": " << std::strerror(errno);
    ASSERT_EQ(::send(stalled.back().get(), "GET /health HTT", 15, MSG_NOSIGNAL), 15);
  }
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(probe(port, "/health"), 200) << "probe " << i;
    EXPECT_EQ(probe(port, "/ready"), 200) << "probe " << i;
  }
}

// A new connection beyond the limit closes the oldest one that has not completed a request; the others stay.
TEST(HealthServerSlowClients, ANewConnectionBeyondTheLimitEvictsTheOldestIdleOne) {
  CannedStatus canned{status_in("ready")};
  Options o;
  o.connection_limit = 4;
  o.request_deadline_s = 120;
  auto s = HealthServer::start("127.0.0.1:0", canned.source(), o);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  const uint16_t port = (*s)->port();
  std::vector<UniqueFd> idle;
  // Loopback connections are in the listen queue when connect returns; the server accepts them in order.
  for (int i = 0; i < 4; ++i) {
    idle.push_back(connect_from("127.0.0.6", port));
    ASSERT_TRUE(idle.back());
  }
  UniqueFd fifth = connect_from("127.0.0.6", port);
  ASSERT_TRUE(fifth);
  EXPECT_TRUE(closed_by_server(idle[0].get()));
  for (size_t i = 1; i < idle.size(); ++i) EXPECT_TRUE(still_open(idle[i].get())) << "connection " << i;
  EXPECT_TRUE(still_open(fifth.get()));
}

// A client that sends a byte of its headers every 100 ms never lets the idle timeout run out; the request
// deadline, counted from the accept, closes it all the same.
TEST(HealthServerSlowClients, ATricklingConnectionIsClosedAtTheRequestDeadline) {
  CannedStatus canned{status_in("ready")};
  Options o;
  o.request_deadline_s = 1;
  auto s = HealthServer::start("127.0.0.1:0", canned.source(), o);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  UniqueFd slow = connect_from("127.0.0.8", (*s)->port());
  ASSERT_TRUE(slow);
  const std::string head = "GET /health HTTP/1.1\r\nX-Slow: ";
  ASSERT_EQ(::send(slow.get(), head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  bool closed = false;
  for (int i = 0; i < 300 && !closed; ++i) {  // 30 s of trickling, far past the deadline
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    char c;
    const ssize_t n = ::recv(slow.get(), &c, 1, MSG_DONTWAIT);
    ASSERT_LE(n, 0) << "an answer to a request that never ended";
    closed = n == 0 || (n < 0 && errno == ECONNRESET) || ::send(slow.get(), "y", 1, MSG_NOSIGNAL) != 1;
  }
  EXPECT_TRUE(closed);
}

TEST(HealthServerSlowClients, AnIdleConnectionIsClosedAfterTheTimeout) {
  CannedStatus canned{status_in("ready")};
  Options o;
  o.request_deadline_s = 1;
  auto s = HealthServer::start("127.0.0.1:0", canned.source(), o);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  UniqueFd idle = connect_from("127.0.0.7", (*s)->port());
  ASSERT_TRUE(idle);
  ASSERT_EQ(::send(idle.get(), "GET /he", 7, MSG_NOSIGNAL), 7);
  EXPECT_TRUE(closed_by_server(idle.get()));
}

// The supervisor's loop stuck in a status call: probes still get an answer (503, not answering) instead of
// hanging, and recover as soon as the loop answers again.
TEST(HealthServerSlowClients, AStuckStatusSourceIsAnsweredAsDownNotHung) {
  std::mutex m;
  std::condition_variable cv;
  bool stuck = true;
  Source src{[&]() -> json {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return !stuck; });
    return status_in("ready");
  }};
  Options o;
  o.answer_deadline_s = 0.2;
  auto s = HealthServer::start("127.0.0.1:0", src, o);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  httplib::Client c("127.0.0.1", (*s)->port());
  c.set_read_timeout(5, 0);
  auto r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  auto body = json::parse(r->body);
  EXPECT_EQ(body["down"], json::array({"supervisor: not answering"}));
  EXPECT_NE(body.value("error", "").find("no status from the supervisor"), std::string::npos) << body;
  {
    std::lock_guard lock(m);
    stuck = false;
  }
  cv.notify_all();
  EXPECT_EQ(probe((*s)->port(), "/ready"), 200);
}

}  // namespace
}  // namespace fr::health
