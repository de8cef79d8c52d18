// The config keys and rules of engine.kind = "vllm" and weights.daemon = "vllm-preload": each error names
// file:line and the key.
#include <gtest/gtest.h>

#include "supervisor/config.h"
#include "supervisor/engines/engine_kind.h"

namespace fr::supervisor {
namespace {

// The file and its kind's checks, as fastrestartd checks a config (parse_config leaves the latter out).
std::string error_of(const std::string& text) {
  auto r = parse_config(text, "/etc/fastrestart/m.toml");
  if (!r.ok()) return r.error().message;
  auto kind = check_engine_config(*r);
  return kind.ok() ? "<valid>" : kind.error().message;
}

constexpr const char* kPreload =
    "gpus = [0]\n[engine]\nkind = \"vllm\"\ncommand = [\"vllm\", \"serve\"]\nflags = [\"/m\"]\n[weights]\ndaemon = \"vllm-preload\"\n";

TEST(VllmConfig, APreloadConfigParsesWithItsDefaults) {
  auto c = parse_config(kPreload, "/etc/fastrestart/m.toml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->weights.daemon, DaemonKind::kVllmPreload);
  EXPECT_TRUE(c->weights.fallback);
  EXPECT_EQ(c->weights.health_port, 0);
  EXPECT_EQ(c->weights.watch_interval_s, 10);
  EXPECT_STREQ(daemon_kind_name(DaemonKind::kVllmPreload), "vllm-preload");
}

TEST(VllmConfig, PreloadNeedsTheVllmKind) {
  EXPECT_EQ(error_of("gpus = [0]\n[engine]\ncommand = [\"vllm\", \"serve\"]\n[weights]\ndaemon = \"vllm-preload\"\n"),
            "/etc/fastrestart/m.toml:5: weights.daemon: \"vllm-preload\" needs engine.kind = \"vllm\"");
}

TEST(VllmConfig, PreloadNeedsServeInTheCommand) {
  EXPECT_NE(error_of("gpus = [0]\n[engine]\nkind = \"vllm\"\ncommand = [\"python3\", \"-m\", \"vllm.entrypoints.openai.api_server\"]\n"
                     "[weights]\ndaemon = \"vllm-preload\"\n")
                .find("m.toml:4: engine.command: with weights.daemon = \"vllm-preload\" it must hold the `serve` subcommand"),
            std::string::npos);
}

TEST(VllmConfig, PreloadNeedsAWeightsMode) {
  EXPECT_NE(error_of(std::string(kPreload) + "mode = \"off\"\n").find("m.toml:7: weights.daemon: \"vllm-preload\" needs weights.mode"),
            std::string::npos);
}

TEST(VllmConfig, BadValuesNameTheKey) {
  EXPECT_EQ(error_of(std::string(kPreload) + "health_port = 70000\n"),
            "/etc/fastrestart/m.toml:8: weights.health_port: must be an integer in 0..65535, got 70000");
  EXPECT_EQ(error_of(std::string(kPreload) + "fallback = \"no\"\n"),
            "/etc/fastrestart/m.toml:8: weights.fallback: expected a boolean (true or false), got string \"no\"");
  EXPECT_EQ(error_of("[engine]\ncommand = [\"vllm\", \"serve\"]\nvllm_version = \"latest\"\n[weights]\nmode = \"off\"\n"),
            "/etc/fastrestart/m.toml:3: engine.vllm_version: must be a vLLM version like \"0.31.0\" (or empty), got \"latest\"");
  EXPECT_NE(error_of("[engine]\nkind = \"vllm\"\ncommand = [\"vllm\", \"serve\"]\nvllm_rules = \"/nonexistent/rules.toml\"\n[weights]\nmode = \"off\"\n")
                .find("m.toml:4: engine.vllm_rules: open /nonexistent/rules.toml: No such file or directory"),
            std::string::npos);
}

// vLLM only warns about an unknown VLLM_* variable, unless --fail-on-environ-validation is given.
TEST(VllmConfig, ARemovedVariableIsAnErrorOnlyWhenVllmWouldRefuseIt) {
  const std::string env = "[engine.env]\nVLLM_PLE_CPU_OFFLOAD = \"1\"\n[weights]\nmode = \"off\"\n";
  EXPECT_EQ(error_of("[engine]\nkind = \"vllm\"\ncommand = [\"vllm\", \"serve\"]\nflags = [\"m\"]\n" + env), "<valid>");
  EXPECT_NE(error_of("[engine]\nkind = \"vllm\"\ncommand = [\"vllm\", \"serve\"]\nflags = [\"m\", \"--fail-on-environ-validation\"]\n" + env)
                .find("m.toml:5: engine.env: VLLM_PLE_CPU_OFFLOAD (engine.env): vLLM 0.31.0: removed; use --engram-config"),
            std::string::npos);
}

TEST(VllmConfig, AnOlderVllmVersionAllowsWhatItHad) {
  EXPECT_EQ(error_of("[engine]\nkind = \"vllm\"\ncommand = [\"vllm\", \"serve\"]\nflags = [\"m\", \"--tokenizer-mode\", \"slow\"]\n"
                     "vllm_version = \"0.30.0\"\n[weights]\nmode = \"off\"\n"),
            "<valid>");
}

// Reading a config runs no vLLM check (another machine, or fastrestartctl, may read it without the rules);
// the check runs where fastrestartd checks the config, with the same message.
TEST(VllmConfig, ParsingLeavesTheFlagChecksToTheConfigCheck) {
  const std::string text = "[engine]\nkind = \"vllm\"\ncommand = [\"vllm\", \"serve\"]\nflags = [\"m\", \"--tokenizer-mode\", \"slow\"]\n"
                           "[weights]\nmode = \"off\"\n";
  auto c = parse_config(text, "/etc/fastrestart/m.toml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto st = check_engine_config(*c);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message.rfind("/etc/fastrestart/m.toml:4: engine.flags: --tokenizer-mode slow: vLLM 0.31.0", 0), 0u)
      << st.error().message;
  auto rules = parse_config("[engine]\nkind = \"vllm\"\ncommand = [\"vllm\", \"serve\"]\nvllm_rules = \"/nonexistent/rules.toml\"\n"
                            "[weights]\nmode = \"off\"\n", "/etc/fastrestart/m.toml");
  EXPECT_TRUE(rules.ok()) << "the rules file is read by the check, not by the parse";
}

}  // namespace
}  // namespace fr::supervisor
