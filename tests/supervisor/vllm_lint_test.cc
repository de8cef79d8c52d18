// The checks before a push, against the built-in rules.
#include "supervisor/engines/vllm/vllm_lint.h"

#include <gtest/gtest.h>

namespace fr::supervisor {
namespace {

std::vector<LintFinding> lint(std::vector<std::string> flags, const std::string& version = "0.31.0",
                              std::map<std::string, std::string> env = {}, DaemonKind daemon = DaemonKind::kNative,
                              std::vector<std::string> command = {"vllm", "serve"}) {
  const auto& rules = builtin_vllm_rules();
  LintInput in{command, flags, env, {}, daemon, WeightsMode::kZeroCopy};
  return lint_vllm(rules, lint_target(rules, "", version), in);
}

TEST(VllmLint, CleanFlagsHaveNoFindings) {
  EXPECT_TRUE(lint({"m", "--dtype", "bfloat16", "--max-model-len", "8192", "-tp", "4"}).empty());
}

TEST(VllmLint, ARemovedValueIsAnErrorNamingTheFlagAndTheVersion) {
  auto f = lint({"m", "--tokenizer_mode=slow"});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kError);
  EXPECT_EQ(f[0].message.rfind("--tokenizer_mode=slow: vLLM 0.31.0: tokenizer_mode \"slow\" was removed; use --tokenizer-mode auto", 0), 0u)
      << f[0].message;
  EXPECT_TRUE(lint({"m", "--tokenizer-mode", "auto"}).empty());
}

TEST(VllmLint, RulesApplyFromTheirVersionOn) {
  EXPECT_TRUE(lint({"m", "--tokenizer-mode", "slow"}, "0.30.1").empty());
  EXPECT_EQ(lint({"m", "--default-max-num-batched-tokens", "8"}, "0.30.0").size(), 1u);
  EXPECT_TRUE(lint({"m", "--default-max-num-batched-tokens", "8"}, "0.29.0").empty());
}

TEST(VllmLint, ARenameNamesTheNewFlag) {
  auto f = lint({"m", "--enable-mamba-fine-grained-prefix-cache"});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].message.find("use --enable-mamba-shared-prefix-checkpoint"), std::string::npos);
}

TEST(VllmLint, CommaSeparatedTracesOnly) {
  EXPECT_EQ(lint({"m", "--collect-detailed-traces", "model,worker"}).size(), 1u);
  EXPECT_TRUE(lint({"m", "--collect-detailed-traces", "model"}).empty());
}

TEST(VllmLint, TheFp8RedirectIsAWarning) {
  auto f = lint({"m", "-q", "fp8"});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kWarning);
  EXPECT_NE(f[0].message.find("fp8_per_tensor"), std::string::npos);
  EXPECT_FALSE(has_errors(f));
}

TEST(VllmLint, RemovedEnvironmentVariablesAndTheOldEntryPoint) {
  auto f = lint({"m"}, "0.31.0", {{"VLLM_PLE_CPU_OFFLOAD", "1"}, {"VLLM_PREFIX_CACHE_RETENTION_INTERVAL", "4096"}, {"HF_HOME", "/x"}});
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].subject, "VLLM_PLE_CPU_OFFLOAD (engine.env)");
  EXPECT_EQ(f[0].severity, Severity::kWarning) << "vLLM ignores an unknown variable";
  EXPECT_NE(f[0].message.find("use --engram-config"), std::string::npos);
  EXPECT_NE(f[1].message.find("vLLM 0.30.0"), std::string::npos);
  auto fatal = lint({"m", "--fail-on-environ-validation"}, "0.31.0", {{"VLLM_PLE_CPU_OFFLOAD", "1"}});
  ASSERT_EQ(fatal.size(), 1u);
  EXPECT_EQ(fatal[0].severity, Severity::kError) << fatal[0].message;
  auto c = lint({"--model", "m"}, "0.31.0", {}, DaemonKind::kNative, {"python3", "-m", "vllm.entrypoints.openai.api_server"});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].severity, Severity::kWarning);
  EXPECT_NE(c[0].message.find("use the vllm CLI"), std::string::npos) << c[0].message;
}

TEST(VllmLint, MultimodalKwargsWithoutTheTrustFlagWarn) {
  EXPECT_EQ(lint({"m", "--limit-mm-per-prompt", "{\"image\": 2}"}).size(), 1u);
  EXPECT_TRUE(lint({"m", "--limit-mm-per-prompt", "{\"image\": 2}", "--trust-request-mm-kwargs"}).empty());
}

TEST(VllmLint, AFlagNewerThanTheEngineIsAnError) {
  auto f = lint({"m", "--max-num-active-seqs", "64"}, "0.30.0");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].message.find("needs vLLM >= 0.31.0"), std::string::npos);
}

TEST(VllmLint, PreloadRefusesWhatIpcCacheCannotLoad) {
  auto f = lint({"m", "--quantization", "awq"}, "0.31.0", {}, DaemonKind::kVllmPreload);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].message.find("UnsupportedQuantForIPCError"), std::string::npos);
  EXPECT_EQ(lint({"m", "--load-format", "ipc_cache"}, "0.31.0", {}, DaemonKind::kVllmPreload).size(), 1u);
  auto old = lint({"m"}, "0.30.0", {}, DaemonKind::kVllmPreload);
  ASSERT_EQ(old.size(), 1u);
  EXPECT_NE(old[0].message.find("`vllm preload` needs vLLM >= 0.31.0"), std::string::npos);
}

TEST(VllmLint, TheTargetPrefersWhatTheEngineReported) {
  const auto& r = builtin_vllm_rules();
  EXPECT_EQ(lint_target(r, "0.30.1", "0.29.0").version.str(), "0.30.1");
  EXPECT_EQ(lint_target(r, "", "0.29.0").source, "engine.vllm_version");
  EXPECT_EQ(lint_target(r, "", "").version.str(), "0.31.0");
}

}  // namespace
}  // namespace fr::supervisor
