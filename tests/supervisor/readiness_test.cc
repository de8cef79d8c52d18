// The verdict on the engine's answer to the readiness request (judge_completion), fed directly: the
// same function fuzz_readiness feeds with hostile bodies; and the probe itself against a real HTTP server.
#include "supervisor/readiness.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

namespace fr::supervisor {
namespace {

TEST(ReadinessJudge, TheTextMustMatchTheOracle) {
  ReadinessConfig rc;
  rc.expect_text = " Paris";
  EXPECT_TRUE(judge_completion(200, R"({"choices":[{"text":" Paris"}]})", rc).ok);
  auto r = judge_completion(200, R"({"choices":[{"text":" Lyon"}]})", rc);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.detail, R"(the readiness answer " Lyon" differs from the oracle " Paris")");
}

TEST(ReadinessJudge, MalformedAnswersSayWhy) {
  ReadinessConfig rc;
  for (const char* body : {"", "[]", "{\"choices\":{}}", "{\"choices\":[]}", "{\"choices\":[1]}", "{\"choices\":[{\"text\":3}]}"})
    EXPECT_EQ(judge_completion(200, body, rc).detail, "POST /v1/completions: the answer has no choices[0].text") << body;
}

// An error body is quoted and escaped: one line of valid UTF-8, whatever bytes the engine sent.
TEST(ReadinessJudge, AnErrorBodyBecomesOneLineOfValidUtf8) {
  ReadinessConfig rc;
  auto r = judge_completion(500, std::string("boom\n\xff\xfe line two", 16), rc);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.detail.find('\n'), std::string::npos) << r.detail;
  EXPECT_NO_THROW((void)nlohmann::json(r.detail).dump());
  EXPECT_EQ(r.detail.rfind("POST /v1/completions: HTTP 500 \"boom\\n", 0), 0u) << r.detail;
}

// An engine on a loopback port that records the requests it is sent, in order.
class RecordingEngine {
 public:
  explicit RecordingEngine(int health_status) {
    m_server.Get("/health", [this, health_status](const httplib::Request&, httplib::Response& res) {
      record("GET /health");
      res.status = health_status;
    });
    m_server.Post("/v1/completions", [this](const httplib::Request&, httplib::Response& res) {
      record("POST /v1/completions");
      res.set_content(R"({"choices":[{"text":" Paris"}]})", "application/json");
    });
    m_port = static_cast<uint16_t>(m_server.bind_to_any_port("127.0.0.1"));
    // Bound means listening: requests sent before the thread accepts wait in the queue.
    m_thread = std::thread([this] { m_server.listen_after_bind(); });
  }
  ~RecordingEngine() {
    m_server.stop();
    m_thread.join();
  }
  uint16_t port() const { return m_port; }
  std::vector<std::string> seen() {
    std::lock_guard lock(m_mutex);
    return m_seen;
  }

 private:
  void record(std::string what) {
    std::lock_guard lock(m_mutex);
    m_seen.push_back(std::move(what));
  }
  httplib::Server m_server;
  uint16_t m_port = 0;
  std::thread m_thread;
  std::mutex m_mutex;
  std::vector<std::string> m_seen;
};

// The completion goes first, so that on a private endpoint it waits in the queue for the engine's first
// batch; /health follows it, and both must pass.
TEST(ReadinessProbe, TheCompletionGoesBeforeHealthAndBothMustPass) {
  ReadinessConfig rc;
  {
    RecordingEngine engine(200);
    auto r = probe_readiness("127.0.0.1", engine.port(), rc, 5);
    EXPECT_TRUE(r.ok) << r.detail;
    EXPECT_TRUE(r.health_ok);
    EXPECT_EQ(engine.seen(), (std::vector<std::string>{"POST /v1/completions", "GET /health"}));
  }
  {
    RecordingEngine engine(503);
    auto r = probe_readiness("127.0.0.1", engine.port(), rc, 5);
    EXPECT_FALSE(r.ok);
    EXPECT_FALSE(r.health_ok);
    EXPECT_EQ(r.detail, "GET /health: HTTP 503");
  }
  {
    RecordingEngine engine(200);
    rc.request_path.clear();  // health only
    auto r = probe_readiness("127.0.0.1", engine.port(), rc, 5);
    EXPECT_TRUE(r.ok) << r.detail;
    EXPECT_EQ(engine.seen(), std::vector<std::string>{"GET /health"});
  }
}

}  // namespace
}  // namespace fr::supervisor
