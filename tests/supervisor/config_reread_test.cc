// A re-read config against the running one (supervisor/config_reread.h): what is applied, what waits for
// fastrestartd's next start, and what refuses the whole re-read. No process: the Supervisor's side is in
// supervisor_e2e_test (SIGHUP and `fastrestartctl reload` without flags).
#include "supervisor/config_reread.h"

#include <gtest/gtest.h>

#include <string>

namespace fr::supervisor {
namespace config_reread_test {

const std::string kPath = "/etc/fastrestart/reread.toml";

Config parsed(const std::string& text) {
  auto c = parse_config(text, kPath);
  EXPECT_TRUE(c.ok()) << c.error().message;
  return c.ok() ? *c : Config{};
}

// A config on the host backend with the engine's flags, its port, its kind, a [readiness] prompt and a
// [memory] utilization; the tests change one at a time.
std::string text(const std::string& flags = R"("--model", "m")", int port = 8000, const std::string& kind = "generic",
                 const std::string& prompt = "The capital of France is", double utilization = 0.9,
                 const std::string& front = "") {
  return "[engine]\ncommand = [\"fastrestart-tinyengine\", \"serve\"]\nflags = [" + flags + "]\nport = " +
         std::to_string(port) + "\nkind = \"" + kind + "\"\n" + (front.empty() ? "" : "listen = \"front\"\n") +
         "[weights]\nbackend = \"host\"\ncheckpoint = \"/models/tiny\"\n[readiness]\nprompt = \"" + prompt +
         "\"\n[memory]\nutilization = " + std::to_string(utilization) + "\n" + front;
}

TEST(ConfigReread, TheSameFileChangesNothing) {
  const Config running = parsed(text());
  auto r = reread(running, parsed(text()));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->flags_changed);
  EXPECT_FALSE(r->kind_deferred);
  EXPECT_EQ(r->config.engine.flags, running.engine.flags);
  EXPECT_EQ(r->config.path, kPath);
}

TEST(ConfigReread, NewFlagsReadinessAndMemoryAreApplied) {
  auto r = reread(parsed(text()), parsed(text(R"("--model", "m", "--max-num-seqs", "8")", 8000, "generic", "Hello", 0.5)));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->flags_changed);
  EXPECT_EQ(r->config.engine.flags.words(), (std::vector<std::string>{"--model", "m", "--max-num-seqs", "8"}));
  EXPECT_EQ(r->config.readiness.prompt, "Hello");
  EXPECT_DOUBLE_EQ(r->config.memory.utilization, 0.5);
}

TEST(ConfigReread, AnotherEngineKindWaitsForTheNextStartAndTheRestApplies) {
  const Config running = parsed(text());
  auto r = reread(running, parsed(text(R"("--model", "m")", 8000, "vllm", "Hi")));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->kind_deferred);
  EXPECT_EQ(r->config.engine.kind, running.engine.kind);
  EXPECT_EQ(r->config.readiness.prompt, "Hi");
}

TEST(ConfigReread, AnotherPortIsRefusedWholeAndNamesIt) {
  auto r = reread(parsed(text()), parsed(text(R"("--model", "m2")", 8001)));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
  EXPECT_NE(r.error().message.find("engine.port 8000 -> 8001"), std::string::npos) << r.error().message;
}

TEST(ConfigReread, AnotherFrontSettingIsRefusedWholeAndNamesIt) {
  auto r = reread(parsed(text(R"("--model", "m")", 8000, "generic", "p", 0.9, "[front]\nhold_s = 30\n")),
                  parsed(text(R"("--model", "m2")", 8000, "generic", "p", 0.9, "[front]\nhold_s = 12.5\n")));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("front.hold_s"), std::string::npos) << r.error().message;
}

}  // namespace config_reread_test
}  // namespace fr::supervisor
