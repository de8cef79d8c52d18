// The checks fastrestartd runs on its engine (supervisor/engine_watch.h) through a fake host and an engine
// that is an HTTP server in this process: readiness polled until it passes, the start deadline, health
// failures in a row, and a probe's answer about an engine that is no longer the current one.
#include "supervisor/engine_watch.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace fr::supervisor {
namespace engine_watch_test {

// An engine on a loopback port whose answers the test sets: the completion's status (200 answers " Paris"),
// /health's, and how long each completion takes.
class SetEngine {
 public:
  std::atomic<int> completion_status{200}, health_status{200};
  std::atomic<int> completion_delay_ms{0};
  std::atomic<int> completions{0};

  SetEngine() {
    m_server.Get("/health", [this](const httplib::Request&, httplib::Response& res) { res.status = health_status.load(); });
    m_server.Post("/v1/completions", [this](const httplib::Request&, httplib::Response& res) {
      ++completions;
      std::this_thread::sleep_for(std::chrono::milliseconds(completion_delay_ms.load()));
      res.status = completion_status.load();
      res.set_content(res.status == 200 ? R"({"choices":[{"text":" Paris"}]})" : "loading", "application/json");
    });
    m_port = static_cast<uint16_t>(m_server.bind_to_any_port("127.0.0.1"));
    m_thread = std::thread([this] { m_server.listen_after_bind(); });
  }
  ~SetEngine() {
    m_server.stop();
    m_thread.join();
  }
  uint16_t port() const { return m_port; }

 private:
  httplib::Server m_server;
  uint16_t m_port = 0;
  std::thread m_thread;
};

class FakeWatchHost final : public EngineWatchHost {
 public:
  Loop loop;
  Engine engine;
  Engine* current = &engine;
  int passed = 0, starting = 0, timed_out = 0, hung = 0;
  std::function<void()> on_event;  // after each of the events below: the test may stop the loop

  Engine* watched_engine() override { return current; }
  std::string readiness_model() const override { return ""; }
  void readiness_passed() override { ++passed; event(); }
  void still_starting() override { ++starting; event(); }
  void start_timed_out() override { ++timed_out; event(); }
  void engine_hung() override { ++hung; event(); }

 private:
  void event() {
    if (on_event) on_event();
  }
};

class EngineWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg.engine.host = "127.0.0.1";
    cfg.engine.port = server.port();
    cfg.readiness.poll_interval_s = 0.02;
    cfg.readiness.check_interval_s = 0.02;
    cfg.readiness.check_timeout_s = 5;
    cfg.readiness.startup_timeout_s = 30;
    cfg.readiness.hang_after_failures = 3;
    host.engine.pid = 4242;
  }
  // Runs the loop until `done` holds after an event of the host, or `limit_s` pass.
  void run_until(const std::function<bool()>& done, double limit_s = 20) {
    host.on_event = [&] {
      if (done()) host.loop.stop();
    };
    Timer limit(host.loop);
    limit.start(limit_s, [&] { host.loop.stop(); });
    host.loop.run();
    host.on_event = nullptr;
  }

  SetEngine server;
  Config cfg;
  FakeWatchHost host;
  EngineWatch watch{host.loop, cfg, host};
};

TEST_F(EngineWatchTest, ReadinessIsPolledUntilTheEngineAnswersThenPassesOnce) {
  server.completion_status = 503;
  watch.arm(/*poll_now=*/true);
  run_until([&] { return host.starting >= 3; });
  EXPECT_EQ(host.passed, 0);
  server.completion_status = 200;
  run_until([&] { return host.passed > 0; });
  EXPECT_EQ(host.passed, 1);
  EXPECT_EQ(host.timed_out, 0);
  watch.stop();
}

TEST_F(EngineWatchTest, AnEngineNotReadyByTheDeadlineIsMarkedAndReported) {
  cfg.readiness.startup_timeout_s = 0.3;
  server.completion_status = 503;
  watch.arm(/*poll_now=*/true);
  run_until([&] { return host.timed_out > 0; });
  EXPECT_EQ(host.timed_out, 1);
  EXPECT_TRUE(host.engine.killed_timeout);
  EXPECT_EQ(host.passed, 0);
  watch.stop();
}

TEST_F(EngineWatchTest, ReadinessPassedStopsTheDeadline) {
  cfg.readiness.startup_timeout_s = 0.5;
  watch.arm(/*poll_now=*/true);
  run_until([&] { return host.passed > 0; });
  ASSERT_EQ(host.passed, 1);
  watch.stop_deadline();
  host.engine.path = "cold";  // ready: no more readiness polls
  run_until([] { return false; }, 1.0);
  EXPECT_EQ(host.timed_out, 0);
  EXPECT_FALSE(host.engine.killed_timeout);
}

TEST_F(EngineWatchTest, HealthFailuresInARowMarkTheEngineHung) {
  host.engine.path = "cold";
  server.health_status = 500;
  server.completion_status = 500;
  watch.start_health();
  run_until([&] { return host.hung > 0; });
  EXPECT_EQ(host.hung, 1);
  EXPECT_TRUE(host.engine.killed_hang);
  watch.stop();
}

TEST_F(EngineWatchTest, AHealthyEngineIsNeverHung) {
  host.engine.path = "cold";
  watch.start_health();
  run_until([] { return false; }, 1.0);
  EXPECT_EQ(host.hung, 0);
  EXPECT_FALSE(host.engine.killed_hang);
  watch.stop();
}

TEST_F(EngineWatchTest, AnAnswerAboutAnEngineThatIsNoLongerCurrentIsDropped) {
  server.completion_delay_ms = 300;
  watch.arm(/*poll_now=*/true);
  // The first probe is in flight: the engine is replaced by another before it answers.
  Timer swap(host.loop);
  Engine next;
  next.pid = 4343;
  next.path = "cold";  // ready already: it wants no readiness probe
  swap.start(0.1, [&] { host.current = &next; });
  run_until([] { return false; }, 1.5);
  EXPECT_GE(server.completions.load(), 1);
  EXPECT_EQ(host.passed, 0);
  watch.stop();
}

}  // namespace engine_watch_test
}  // namespace fr::supervisor
