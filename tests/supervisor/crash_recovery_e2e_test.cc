// fastrestartd itself SIGKILLed (docs/supervisor.md): its engine and daemon die with it, and the next
// fastrestartd kills the worker the engine left in its process group before starting a new engine, which
// then gets the port. Before the fix, the old engine kept the port and every new start crashed.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "support/fastrestartd_config.h"
#include "support/harness.h"
#include "support/supervised.h"

namespace fr {
namespace {

using nlohmann::json;

bool gone(pid_t pid, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {  // we are the subreaper of what the supervisor leaves
    }
    if (::kill(pid, 0) != 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(FastrestartdCrash, Kill9OfTheSupervisorLeavesNothingAndTheNextOneServes) {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphans come to this test, where it can see them
  struct Restore {
    ~Restore() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
  } restore;
  test::TempDir d;
  ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", d / "model"}).exit_code, 0);
  const uint16_t port = test::free_port();
  test::FastrestartdConfig c(d.path());
  c.tiny_engine({.binary = FR_TINYENGINE_BIN, .model = d / "model", .port = port,
                 .flags = {"--load-format", "fastrestart", "--fastrestart-socket-dir", d / "run", "--fault-spawn-worker"}})
      .host_weights(d / "model", d / "run")
      .text("readiness", "model", "t").number("readiness", "poll_interval_s", 0.05).number("restart", "backoff_initial_s", 0.05);
  const auto sup_owner = test::start_fastrestartd(FR_FASTRESTARTD_BIN, c);
  test::Supervised& sup = *sup_owner;
  json s;
  ASSERT_TRUE(sup.wait_for([](const json& j) { return j.value("state", "") == "ready"; }, 60, &s)) << sup.log();
  const pid_t engine = s["engine"]["pid"], daemon = s["daemons"][0]["pid"];
  auto stats = json::parse(test::http_get(port, "/stats").body, nullptr, false);
  const pid_t worker = stats.value("worker_pid", 0);
  ASSERT_GT(worker, 0) << stats.dump();

  EXPECT_EQ(sup.stop(SIGKILL), 128 + SIGKILL);
  EXPECT_TRUE(gone(engine, 10)) << "the engine outlived its supervisor";
  EXPECT_TRUE(gone(daemon, 10)) << "the weight daemon outlived its supervisor";
  ASSERT_EQ(::kill(worker, 0), 0) << "the worker (no parent-death signal, like vLLM's EngineCore) should still run";

  sup.start();
  ASSERT_TRUE(sup.wait_for([&](const json& j) { return j.value("state", "") == "ready" && j["engine"]["pid"] != engine; }, 60, &s))
      << sup.log();
  EXPECT_TRUE(gone(worker, 5)) << "the new fastrestartd did not kill the old engine's worker";
  EXPECT_NE(sup.log().find("killed process group " + std::to_string(engine)), std::string::npos) << sup.log();
  EXPECT_EQ(s.value("restarts", json::object()).value("crash", 0), 0) << "the new engine must get the port at once";
  EXPECT_EQ(sup.stop(SIGTERM), 0) << sup.log();
}

}  // namespace
}  // namespace fr
