// What a vLLM engine says about itself, and the output rules of classify_exit.
#include "supervisor/engines/vllm/vllm_report.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include "supervisor/classify.h"

namespace fr::supervisor {
namespace {

TEST(VllmReport, VersionFromThePlainLineAndFromTheColouredLogo) {
  VllmReport r;
  EXPECT_TRUE(r.observe(builtin_vllm_rules(), "INFO 11-30 08:00:00 [api_server.py:1] vLLM server version 0.31.0, serving model m"));
  EXPECT_EQ(r.get("version"), "0.31.0");
  VllmReport logo;
  logo.observe(builtin_vllm_rules(),
               " \033[93m\u2584\u2584\033[0m \033[94m\u2584\u2588\033[0m \033[1m\u2588     \u2588     \u2588 \u2580\u2584\u2580 \u2588\033[0m  version \033[1m0.31.1rc1\033[0m");
  EXPECT_EQ(logo.get("version"), "0.31.1rc1");
}

TEST(VllmReport, TheRunnerFallbackAndTheDefault) {
  VllmReport v1;
  v1.observe(builtin_vllm_rules(), "WARNING [vllm.py:540] Model Runner V2 does not yet support sequence parallelism; using the V1 model runner instead.");
  v1.finish(builtin_vllm_rules());
  EXPECT_EQ(v1.get("model_runner"), "V1");
  VllmReport logged;  // what vLLM's gpu_worker logs when it runs Model Runner V2
  EXPECT_TRUE(logged.observe(builtin_vllm_rules(), "(EngineCore pid=7) INFO 11-30 08:00:01 [gpu_worker.py:441] Using V2 Model Runner"));
  logged.finish(builtin_vllm_rules());
  EXPECT_EQ(logged.get("model_runner"), "V2");
  VllmReport v2;
  v2.observe(builtin_vllm_rules(), "vLLM server version 0.31.0, serving model m");
  v2.finish(builtin_vllm_rules());
  EXPECT_EQ(v2.get("model_runner").rfind("V2", 0), 0u);
  VllmReport old;
  old.observe(builtin_vllm_rules(), "vLLM server version 0.28.0, serving model m");
  old.finish(builtin_vllm_rules());
  EXPECT_EQ(old.get("model_runner"), "") << "before 0.29 V2 was not the default: say nothing";
}

TEST(VllmReport, TheLoaderPluginsResultLine) {
  auto l = parse_loader_line(
      "(EngineCore pid=7) fastrestart-loader: v=1 result=miss key=- device=cuda:0 tp=0/1 pp=0/1 dp=0/1 mode=zero_copy "
      "tensors=291 bytes=16060522496 attach_ms=- load_ms=11500.2 publish=ok publish_ms=900.1 total_ms=12410.0 "
      "reason=\"no entry with key fields: dtype \\\"float16\\\"\"");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->result, "miss");
  EXPECT_EQ(l->reason, "no entry with key fields: dtype \"float16\"");
  EXPECT_EQ(l->fields.at("publish"), "ok");
  EXPECT_EQ(l->fields.at("tp"), "0/1");
  EXPECT_FALSE(parse_loader_line("fastrestart-loader: v=1 result=maybe reason=\"\""));
  EXPECT_FALSE(parse_loader_line("INFO nothing here"));
  EXPECT_FALSE(parse_loader_line("fastrestart-loader: v=2 result=hit reason=\"\"")) << "an unknown format version";
  EXPECT_EQ(l->fields.count("v"), 0u);
}

TEST(ClassifyWithRules, VllmsMessagesNameTheCause) {
  std::vector<OutputRule> rules;
  for (const auto& f : builtin_vllm_rules().failures) rules.push_back({f.contains, *exit_cause_from_name(f.cause)});
  std::deque<std::string> lines{"INFO loading", "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
                                "Traceback ..."};
  ExitFacts f;
  f.wait_status = 1 << 8;
  f.last_lines = &lines;
  f.rules = &rules;
  auto c = classify_exit(f);
  EXPECT_EQ(c.cause, ExitCause::kKvCacheMemory);
  EXPECT_NE(c.detail.find("No available memory"), std::string::npos);
  lines = {"vllm serve: error: unrecognized arguments: --enable-mamba-fine-grained-prefix-cache"};
  EXPECT_EQ(classify_exit(f).cause, ExitCause::kBadFlags);
  lines = {"ValueError: WeightCacheKey mismatch on fields: ['dtype']"};
  EXPECT_EQ(classify_exit(f).cause, ExitCause::kWeightCache);
  f.rules = nullptr;
  EXPECT_EQ(classify_exit(f).cause, ExitCause::kCrash) << "without the rules: a crash";
  EXPECT_STREQ(exit_cause_name(ExitCause::kBadFlags), "bad_flags");
  EXPECT_EQ(exit_cause_from_name("kv_cache_memory"), ExitCause::kKvCacheMemory);
}

}  // namespace
}  // namespace fr::supervisor
