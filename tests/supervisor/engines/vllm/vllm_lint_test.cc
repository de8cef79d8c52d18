// The checks before a push, against the built-in rules.
#include "supervisor/engines/vllm/vllm_lint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>

#include "supervisor/flag_words.h"
#include "support/harness.h"

namespace fr::supervisor {
namespace {

std::vector<LintFinding> lint(std::vector<std::string> flags, const std::string& version = "0.31.0",
                              std::map<std::string, std::string> env = {}, DaemonKind daemon = DaemonKind::kNative,
                              std::vector<std::string> command = {"vllm", "serve"}) {
  const auto& rules = builtin_vllm_rules();
  LintInput in{command, testing::flags_of(flags), env, {}, daemon, WeightsMode::kZeroCopy, {}};
  return lint_vllm(rules, lint_target(rules, "", version), in);
}

// With weights.daemon = "vllm-preload", the checkpoint facts read as fastrestartd reads them.
std::vector<LintFinding> lint_preload(std::vector<std::string> flags) {
  const auto& rules = builtin_vllm_rules();
  LintInput in{{"vllm", "serve"}, testing::flags_of(flags), {}, {}, DaemonKind::kVllmPreload, WeightsMode::kZeroCopy, {}};
  in.checkpoint = read_checkpoint_facts(in.flags);
  return lint_vllm(rules, lint_target(rules, "", "0.31.0"), in);
}

std::string messages(const std::vector<LintFinding>& f) {
  std::string s;
  for (const auto& x : f) s += x.message + "\n";
  return s;
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

// An allowlist, as vLLM's: quark, torchao, moe_wna16 ... were missing from the old refuse list and would
// fail the preload and then every engine start.
TEST(VllmLint, PreloadAllowsOnlyTheQuantizationsIpcCacheLoads) {
  for (const char* refused : {"quark", "torchao", "moe_wna16", "gptq", "awq_marlin", "compressed-tensors", "bitsandbytes"}) {
    auto f = lint_preload({"m", "--quantization", refused});
    ASSERT_FALSE(f.empty()) << refused;
    EXPECT_EQ(f[0].severity, Severity::kError) << "errors first";
    EXPECT_EQ(f[0].subject, std::string("--quantization ") + refused);
    EXPECT_NE(f[0].message.find("raises UnsupportedQuantForIPCError for any other method, even with fallback"), std::string::npos)
        << f[0].message;
    EXPECT_EQ(std::count_if(f.begin(), f.end(), [](const LintFinding& x) { return x.severity == Severity::kError; }), 1) << messages(f);
  }
  for (const char* allowed : {"fp8", "modelopt_fp4", "mxfp4"}) {
    auto f = lint_preload({"m", "--quantization", allowed});
    EXPECT_FALSE(has_errors(f)) << allowed << ": " << messages(f);
  }
  EXPECT_TRUE(lint_preload({"m"}).empty());
  EXPECT_TRUE(lint({"m", "--quantization", "quark"}).empty()) << "fastrestart's own daemons publish any method";
}

// vLLM detects the quantization from the checkpoint when no --quantization is given.
TEST(VllmLint, PreloadChecksTheCheckpointsOwnQuantization) {
  test::TempDir dir;
  auto model = [&](const std::string& name, const std::string& config) {
    std::string m = dir / name;
    ::mkdir(m.c_str(), 0755);
    std::ofstream(m + "/config.json") << config;
    return m;
  };
  const std::string awq = model("awq", R"({"architectures": ["LlamaForCausalLM"], "quantization_config": {"quant_method": "awq", "bits": 4}})");
  auto f = lint_preload({awq, "--dtype", "float16"});
  ASSERT_EQ(f.size(), 1u) << messages(f);
  EXPECT_EQ(f[0].message.rfind(awq + "/config.json: quantization \"awq\": not with weights.daemon = \"vllm-preload\": ", 0), 0u)
      << f[0].message;
  EXPECT_EQ(lint_preload({"--model", awq}).size(), 1u) << "--model names it too";
  const std::string nvfp4 = model("nvfp4", R"({"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}})");
  EXPECT_TRUE(lint_preload({nvfp4}).empty()) << messages(lint_preload({nvfp4}));
  const std::string mo_fp8 = model("mofp8", R"({"quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}})");
  EXPECT_EQ(lint_preload({mo_fp8}).size(), 1u);
  const std::string fp8 = model("fp8", R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})");
  EXPECT_TRUE(lint_preload({fp8}).empty());
  const std::string oss = model("oss", R"({"architectures": ["GptOssForCausalLM"], "quantization_config": {"quant_method": "mxfp4"}})");
  auto g = lint_preload({oss});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_NE(g[0].message.find("GptOssForCausalLM"), std::string::npos) << g[0].message;
  const std::string plain = model("plain", R"({"architectures": ["LlamaForCausalLM"]})");
  EXPECT_TRUE(lint_preload({plain}).empty());
  // ModelOpt's own file, beside a config.json without quantization_config.
  std::ofstream(plain + "/hf_quant_config.json") << R"({"quantization": {"quant_algo": "W4A8_AWQ"}})";
  auto h = lint_preload({plain});
  ASSERT_EQ(h.size(), 1u);
  EXPECT_NE(h[0].message.find("hf_quant_config.json: quantization \"modelopt:W4A8_AWQ\""), std::string::npos) << h[0].message;
  EXPECT_TRUE(lint_preload({dir / "absent"}).empty()) << "a model that is not a local directory: nothing to read";
}

TEST(VllmLint, PreloadRefusesKvCacheDtypesIpcCacheRefuses) {
  auto f = lint_preload({"m", "--kv-cache-dtype", "bfloat16"});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].message.find("--kv-cache-dtype bfloat16: not with weights.daemon"), std::string::npos) << f[0].message;
  for (const char* ok : {"auto", "fp8", "fp8_e4m3", "fp8_e5m2"})
    EXPECT_TRUE(lint_preload({"m", "--kv-cache-dtype", ok}).empty()) << ok;
  EXPECT_TRUE(lint({"m", "--kv-cache-dtype", "bfloat16"}).empty());
}

// IpcModelLoader.__init__ raises "Unexpected extra config keys" for any key it does not take.
TEST(VllmLint, PreloadRefusesExtraConfigKeysIpcCacheDoesNotTake) {
  auto f = lint_preload({"m", "--model-loader-extra-config", R"({"state_timeout_s": 600, "num_threads": 8, "verify": true})"});
  ASSERT_EQ(f.size(), 1u) << messages(f);
  EXPECT_NE(f[0].message.find("Unexpected extra config keys for load format ipc_cache: ['num_threads', 'verify']"), std::string::npos)
      << f[0].message;
  EXPECT_TRUE(lint_preload({"m", "--model-loader-extra-config", R"({"state_timeout_s": 600, "connect_timeout_s": 2})"}).empty());
  EXPECT_EQ(lint_preload({"m", "--model-loader-extra-config", "[1]"}).size(), 1u);
}

// A pushed flag reaches the lint from a control-socket peer: a value nested two million deep is "not a JSON
// object" like any other, never a stack overflow (docs/reliability.md, "Limits on what a peer sends").
TEST(VllmLint, ADeeplyNestedExtraConfigIsNotAnObjectAndDoesNotCrash) {
  const std::string deep = "{\"a\":" + std::string(2'000'000, '[') + std::string(2'000'000, ']') + "}";
  auto f = lint_preload({"m", "--model-loader-extra-config", deep});
  ASSERT_EQ(f.size(), 1u) << messages(f);
  EXPECT_NE(f[0].message.find("not a JSON object"), std::string::npos) << f[0].message;
}

TEST(VllmLint, TheTargetPrefersWhatTheEngineReported) {
  const auto& r = builtin_vllm_rules();
  EXPECT_EQ(lint_target(r, "0.30.1", "0.29.0").version.str(), "0.30.1");
  EXPECT_EQ(lint_target(r, "", "0.29.0").source, "engine.vllm_version");
  EXPECT_EQ(lint_target(r, "", "").version.str(), "0.31.0");
}

}  // namespace
}  // namespace fr::supervisor
