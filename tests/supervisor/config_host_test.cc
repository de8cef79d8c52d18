// check_host() and fastrestartd --check / a run on configs that parse but that this host cannot start: each
// is an error naming file:line and the key, from --check and from a run, and nothing starts.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "supervisor/config.h"
#include "support/harness.h"

namespace fr::supervisor {
namespace {

// A config the tiny engine could start with (health-only readiness), its lines numbered: control.socket is on
// line 9, weights.checkpoint on line 6, engine.command on line 2.
std::string write_config(const test::TempDir& d, const std::string& command, const std::string& checkpoint,
                         const std::string& socket) {
  std::string cfg = d / "t.toml";
  std::ofstream(cfg) << "[engine]\n"                                       // 1
                     << "command = [\"" << command << "\", \"serve\", \"" << checkpoint << "\"]\n"  // 2
                     << "[weights]\n"                                      // 3
                     << "backend = \"host\"\n"                             // 4
                     << "mode = \"zero_copy\"\n"                           // 5
                     << "checkpoint = \"" << checkpoint << "\"\n"          // 6
                     << "[control]\n"                                      // 7
                     << "state_dir = \"" << (d / "state") << "\"\n"        // 8
                     << "socket = \"" << socket << "\"\n"                  // 9
                     << "[http]\nlisten = \"none\"\n";
  return cfg;
}

struct HostCheck : ::testing::Test {
  test::TempDir d;
  std::string model = d / "model";
  std::string ctl = d / "run/t.ctl";
  void SetUp() override {
    std::filesystem::create_directories(model);
    std::ofstream(model + "/model.safetensors") << "x";
    ASSERT_EQ(::mkdir((d / "run").c_str(), 0700), 0);
  }
  // check_host's error for `cfg`, "" when it passes.
  std::string check(const std::string& cfg) {
    auto c = load_config(cfg);
    if (!c.ok()) return "load_config: " + c.error().message;
    auto s = check_host(*c);
    return s.ok() ? "" : s.error().message;
  }
  // --check and a run both fail with exit code 2 and `message`, and the run starts nothing.
  void expect_refused(const std::string& cfg, const std::string& message) {
    auto checked = test::run({FR_FASTRESTARTD_BIN, "--check", "--config", cfg});
    EXPECT_EQ(checked.exit_code, 2) << checked.output;
    EXPECT_NE(checked.output.find(message), std::string::npos) << checked.output << "\nexpected: " << message;
    auto ran = test::run({FR_FASTRESTARTD_BIN, "--config", cfg});
    EXPECT_EQ(ran.exit_code, 2) << ran.output;
    EXPECT_NE(ran.output.find(message), std::string::npos) << ran.output << "\nexpected: " << message;
    EXPECT_EQ(ran.output.find("weightd"), std::string::npos) << "a daemon was started:\n" << ran.output;
    EXPECT_FALSE(std::filesystem::exists(ctl)) << "the control socket was created";
  }
};

TEST_F(HostCheck, AStartableConfigPasses) {
  EXPECT_EQ(check(write_config(d, FR_TINYENGINE_BIN, model, ctl)), "");
  auto r = test::run({FR_FASTRESTARTD_BIN, "--check", "--config", write_config(d, FR_TINYENGINE_BIN, model, ctl)});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(HostCheck, AControlSocketInAWorldWritableDirectoryIsRefused) {
  ASSERT_EQ(::mkdir((d / "open").c_str(), 0777), 0);
  ASSERT_EQ(::chmod((d / "open").c_str(), 01777), 0);
  ctl = d / "open/t.ctl";
  const std::string cfg = write_config(d, FR_TINYENGINE_BIN, model, ctl);
  const std::string msg = cfg + ":9: control.socket: its directory " + (d / "open") + " has mode 1777";
  EXPECT_NE(check(cfg).find(msg), std::string::npos) << check(cfg);
  EXPECT_NE(check(cfg).find("world-writable"), std::string::npos) << check(cfg);
  expect_refused(cfg, msg);
}

TEST_F(HostCheck, AMissingCheckpointIsRefused) {
  const std::string cfg = write_config(d, FR_TINYENGINE_BIN, d / "nope", ctl);
  const std::string msg = cfg + ":6: weights.checkpoint: " + (d / "nope") + " does not exist";
  EXPECT_EQ(check(cfg), msg);
  expect_refused(cfg, msg);
}

TEST_F(HostCheck, ACheckpointDirectoryWithoutSafetensorsIsRefused) {
  std::filesystem::create_directories(d / "empty");
  const std::string cfg = write_config(d, FR_TINYENGINE_BIN, d / "empty", ctl);
  EXPECT_EQ(check(cfg), cfg + ":6: weights.checkpoint: the directory " + (d / "empty") + " holds no *.safetensors file");
}

TEST_F(HostCheck, AnEngineCommandNotOnPathIsRefused) {
  const std::string cfg = write_config(d, "no-such-engine-xyz", model, ctl);
  const std::string msg = cfg + ":2: engine.command: \"no-such-engine-xyz\" is not on $PATH";
  EXPECT_NE(check(cfg).find(msg), std::string::npos) << check(cfg);
  expect_refused(cfg, msg);
}

TEST_F(HostCheck, AnEngineCommandThatIsNotExecutableIsRefused) {
  const std::string cfg = write_config(d, model + "/model.safetensors", model, ctl);
  EXPECT_NE(check(cfg).find(cfg + ":2: engine.command: \"" + model + "/model.safetensors\" cannot be executed"),
            std::string::npos)
      << check(cfg);
}

// The demo's `fastrestart-tinyengine` with a PATH that lacks it: found beside fastrestartd (the build tree's
// src/tinyengine), as the weight daemon is; a fastrestart- name that is nowhere says so.
TEST_F(HostCheck, TheTinyEngineIsFoundBesideFastrestartdWhenNotOnPath) {
  const std::string cfg = write_config(d, "fastrestart-tinyengine", model, ctl);
  auto found = test::run({"/usr/bin/env", "PATH=/usr/bin:/bin", FR_FASTRESTARTD_BIN, "--check", "--config", cfg});
  EXPECT_EQ(found.exit_code, 0) << found.output;
  const std::string missing = write_config(d, "fastrestart-no-such-engine", model, ctl);
  auto r = test::run({"/usr/bin/env", "PATH=/usr/bin:/bin", FR_FASTRESTARTD_BIN, "--check", "--config", missing});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(missing + ":2: engine.command: \"fastrestart-no-such-engine\" is not on $PATH (/usr/bin:/bin) nor beside fastrestartd"),
            std::string::npos)
      << r.output;
}

// A weights.key the tiny engine never asks with: the preload would never be attached. The error says the key
// it does ask with; that key passes.
TEST_F(HostCheck, AWeightsKeyTheTinyEngineNeverAsksWithIsRefusedNamingTheRightOne) {
  auto gen = test::run({FR_TINYENGINE_BIN, "gen", "--out", d / "tiny", "--size", "1M"});
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  std::string cfg = write_config(d, FR_TINYENGINE_BIN, d / "tiny", ctl);
  std::ofstream(cfg, std::ios::app) << "[weights.key]\narch = \"tinyengine\"\n";
  auto r = test::run({FR_FASTRESTARTD_BIN, "--check", "--config", cfg});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(cfg + ":"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("weights.key: {arch = \"tinyengine\"} is not the key fastrestart-tinyengine asks with"),
            std::string::npos)
      << r.output;
  const auto at = r.output.find("asks with for this checkpoint, {");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string want = r.output.substr(at + 32, r.output.find('}', at) - at - 32);  // arch = "...", dtype = ...
  EXPECT_NE(want.find("dtype = "), std::string::npos) << want;
  std::string fixed = write_config(d, FR_TINYENGINE_BIN, d / "tiny", ctl);
  std::ofstream(fixed, std::ios::app) << "[weights.key]\n";
  for (size_t p = 0; p < want.size();) {  // "k = "v", k = "v"" -> one line each
    size_t end = want.find("\", ", p);
    std::ofstream(fixed, std::ios::app) << want.substr(p, end == std::string::npos ? std::string::npos : end + 1 - p) << "\n";
    p = end == std::string::npos ? want.size() : end + 3;
  }
  auto ok = test::run({FR_FASTRESTARTD_BIN, "--check", "--config", fixed});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

TEST_F(HostCheck, SyntaxOnlySkipsTheHostChecks) {
  const std::string cfg = write_config(d, "no-such-engine-xyz", d / "nope", ctl);
  auto r = test::run({FR_FASTRESTARTD_BIN, "--check", "--syntax-only", "--config", cfg});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace fr::supervisor
