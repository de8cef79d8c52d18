// engine.kind = "vllm" (engines/vllm/vllm_adapter.cc): what differs from a generic engine.
#include "supervisor/engines/vllm/vllm_adapter.h"

#include <gtest/gtest.h>

#include "supervisor/flag_words.h"

namespace fr::supervisor {
namespace {

using testing::flags_of;

using nlohmann::json;

Config vllm_config(std::vector<std::string> flags) {
  auto c = parse_config("[engine]\nkind = \"vllm\"\ncommand = [\"vllm\", \"serve\"]\n[weights]\nmode = \"off\"\n", "/etc/fastrestart/m.toml");
  EXPECT_TRUE(c.ok()) << c.error().message;
  c->engine.flags = flags_of(std::move(flags));
  return *c;
}

TEST(VllmEngine, ThePositionalIsTheModelAndTheDataNamesTheDaemonFlags) {
  VllmAdapter a(builtin_vllm_rules());
  EXPECT_EQ(a.flag_rules().positional, "--model");
  EXPECT_EQ(daemon_affecting_changes(a.flag_rules(), flags_of({"m1"}), flags_of({"--model", "m1"})), std::vector<std::string>{});
  EXPECT_EQ(daemon_affecting_changes(a.flag_rules(), flags_of({"m1"}), flags_of({"m2"})), std::vector<std::string>{"--model"});
  EXPECT_EQ(daemon_affecting_changes(a.flag_rules(), flags_of({"m", "--dtype", "bfloat16"}), flags_of({"m", "--dtype", "float16"})),
            std::vector<std::string>{"--dtype"});
  EXPECT_TRUE(daemon_affecting_changes(a.flag_rules(), flags_of({"m", "--max-num-seqs", "8"}), flags_of({"m", "--max-num-seqs", "4"})).empty());
  // An operator's rules add daemon flags, each once.
  VllmRules more = builtin_vllm_rules();
  more.daemon_flags.push_back("--max-num-seqs");
  more.daemon_flags.push_back("--dtype");
  VllmAdapter b(more);
  EXPECT_EQ(std::count(b.flag_rules().daemon_flags.begin(), b.flag_rules().daemon_flags.end(), "--dtype"), 1);
  EXPECT_EQ(daemon_affecting_changes(b.flag_rules(), flags_of({"m", "--max-num-seqs", "8"}), flags_of({"m", "--max-num-seqs", "4"})),
            std::vector<std::string>{"--max-num-seqs"});
}

TEST(VllmEngine, TheConfigsFlagsAreCheckedWithFileLineAndKey) {
  VllmAdapter a(builtin_vllm_rules());
  Config c = vllm_config({"m", "--tokenizer-mode", "slow"});
  c.key_lines["engine.flags"] = 4;
  auto st = a.check_config(c);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message.rfind("/etc/fastrestart/m.toml:4: engine.flags: ", 0), 0u) << st.error().message;
  EXPECT_NE(st.error().message.find("(checked against vLLM "), std::string::npos) << st.error().message;
  EXPECT_TRUE(a.check_config(vllm_config({"m"})).ok());
}

TEST(VllmEngine, APushIsCheckedAgainstTheVersionTheEngineReported) {
  VllmAdapter a(builtin_vllm_rules());
  Config c = vllm_config({"m"});
  auto report = a.new_report();
  report->observe("INFO 11-30 08:00:00 [api_server.py:1] vLLM server version 0.30.0, serving model m");
  EXPECT_EQ(a.reported_version(), "0.30.0");
  FlagCheck old = a.check_flags(c, flags_of({"m", "--tokenizer-mode", "slow"}), false);
  EXPECT_EQ(old.checked_against["version"], "0.30.0");
  EXPECT_FALSE(old.has_errors()) << "0.30 still had it";
  a.note_reported_version("0.31.0");
  FlagCheck now = a.check_flags(c, flags_of({"m", "--tokenizer-mode", "slow"}), false);
  ASSERT_TRUE(now.has_errors());
  ASSERT_FALSE(now.findings.empty());
  EXPECT_TRUE(now.findings[0].error);
  EXPECT_EQ(now.findings[0].subject, "--tokenizer-mode slow");
  EXPECT_NE(now.refusal.find("would not start with"), std::string::npos) << now.refusal;
}

TEST(VllmEngine, ItsOwnWordOnItsWeights) {
  VllmAdapter a(builtin_vllm_rules());
  EXPECT_TRUE(a.reports_attach());
  auto hit = a.new_report();
  hit->observe("(EngineCore pid=7) fastrestart-loader: v=1 result=hit key=k device=cuda:0 tp=0/1 pp=0/1 dp=0/1 mode=zero_copy "
               "tensors=291 bytes=1 attach_ms=1.0 load_ms=- publish=- publish_ms=- total_ms=1.0 reason=\"\"");
  EXPECT_EQ(hit->attach_word().path, "warm");
  EXPECT_EQ(hit->attach_word().counted, "hit");
  auto miss = a.new_report();
  miss->observe("(EngineCore pid=7) fastrestart-loader: v=1 result=miss key=- device=cuda:0 tp=0/1 pp=0/1 dp=0/1 mode=zero_copy "
                "tensors=291 bytes=1 attach_ms=- load_ms=1.0 publish=ok publish_ms=1.0 total_ms=2.0 reason=\"no entry\"");
  const AttachWord w = miss->attach_word();
  EXPECT_EQ(w.path, "cold");
  EXPECT_EQ(w.counted, "fallback");
  EXPECT_EQ(w.misses, std::vector<std::string>{"miss: no entry"});
  EXPECT_EQ(w.miss_reason, "the engine's loader reported miss: no entry");
  auto fallback = a.new_report();
  fallback->observe("WARNING Weight cache unusable (dtype differs); falling back to disk loading");
  EXPECT_EQ(fallback->attach_word().path, "cold");
  EXPECT_EQ(fallback->attach_word().miss_reason, "the engine reported: dtype differs");
  auto silent = a.new_report();
  EXPECT_EQ(silent->attach_word().path, "");
  EXPECT_EQ(silent->attach_word().counted, "none");
  EXPECT_TRUE(silent->to_json().is_object()) << "status shows engine.vllm for every vLLM engine";
}

TEST(VllmEngine, ItsProgressExitMessagesAndReadinessModel) {
  VllmAdapter a(builtin_vllm_rules());
  auto p = a.progress("Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01]");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->done, 2u);
  EXPECT_EQ(p->total, 4u);
  EXPECT_FALSE(a.failure_rules().empty());
  EXPECT_EQ(a.readiness_model(flags_of({"m", "--served-model-name", "n"})), "n");
  EXPECT_EQ(a.readiness_model(flags_of({"m"})), "m");
  EXPECT_EQ(a.readiness_model(flags_of({"--model", "x"})), "x");
  EXPECT_EQ(a.memory_flag(), "--gpu-memory-utilization");
}

TEST(VllmEngine, TheServeFlagsWithVllmPreload) {
  VllmAdapter a(builtin_vllm_rules());
  EXPECT_TRUE(a.passes_to_preload("--dtype"));
  EXPECT_TRUE(a.passes_to_preload("--max-num-seqs")) << "[preload] pass";
  EXPECT_FALSE(a.passes_to_preload("--enable-prefix-caching"));
  FlagList flags = flags_of({"m", "--load-format", "auto", "--model-loader-extra-config", "{\"bogus\": 1}"});
  a.flags_for_preload(flags, {true, true, true, WeightsMode::kCopy, "/run/s"});
  const auto& serving = flags.words();
  ASSERT_EQ(serving.size(), 5u);
  EXPECT_EQ(serving[1], "--load-format");
  EXPECT_EQ(serving[2], "ipc_cache");
  EXPECT_EQ(json::parse(serving[4]), (json{{"fallback", false}, {"mode", "copy"}, {"socket_dir", "/run/s"}}))
      << "strict: no fallback; an unknown key dropped";
  FlagList not_serving = flags_of({"m", "--model-loader-extra-config", "{}"});
  a.flags_for_preload(not_serving, {false, false, true, WeightsMode::kZeroCopy, ""});
  EXPECT_EQ(not_serving.words(), std::vector<std::string>{"m"});
}

// A pushed --model-loader-extra-config nested two million deep is replaced like any non-object, never copied
// (copying recursed once per level: a stack overflow in fastrestartd).
TEST(VllmEngine, ADeeplyNestedExtraConfigIsReplaced) {
  VllmAdapter a(builtin_vllm_rules());
  const std::string deep = "{\"a\":" + std::string(2'000'000, '[') + std::string(2'000'000, ']') + "}";
  FlagList flags = flags_of({"m", "--model-loader-extra-config", deep});
  a.flags_for_preload(flags, {true, true, true, WeightsMode::kCopy, "/run/s"});
  const auto& serving = flags.words();
  ASSERT_EQ(serving.size(), 5u);
  EXPECT_EQ(json::parse(serving[4]), (json{{"fallback", false}, {"mode", "copy"}, {"socket_dir", "/run/s"}}));
}

}  // namespace
}  // namespace fr::supervisor
