// HealthServer through a real httplib::Client: every endpoint in every lifecycle state.
#include <gtest/gtest.h>

#include <httplib.h>

#include <mutex>
#include <stdexcept>
#include <string>

#include "exposition_check.h"
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

}  // namespace
}  // namespace fr::health
