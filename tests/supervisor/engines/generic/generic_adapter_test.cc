// engine.kind = "generic" (engines/generic/generic_adapter.cc): no rules, no checks, no report of its own.
#include <gtest/gtest.h>

#include "supervisor/engines/engine_kind.h"
#include "supervisor/flag_words.h"

namespace fr::supervisor {
namespace {

using testing::flags_of;

const EngineAdapter& generic() { return builtin_engine_adapter(EngineKind::kGeneric); }

TEST(GenericEngine, NoFlagReloadsTheDaemonsUnlessListed) {
  const auto& rules = generic().flag_rules();
  EXPECT_TRUE(rules.daemon_flags.empty());
  EXPECT_EQ(rules.positional, "") << "a positional is not --model";
  EXPECT_TRUE(daemon_affecting_changes(rules, flags_of({"--dtype", "a"}), flags_of({"--dtype", "b"})).empty());
  EXPECT_TRUE(daemon_affecting_changes(rules, flags_of({"m1"}), flags_of({"--model", "m1"}), {"--model"}).size() == 1);
  EXPECT_EQ(daemon_affecting_changes(rules, flags_of({"m1", "--x"}), flags_of({"m2", "--x"}), {""}), std::vector<std::string>{""});
}

TEST(GenericEngine, NoChecksOfItsFlags) {
  Config c;
  c.engine.command = {"vllm", "serve"};
  c.engine.flags = flags_of({"m", "--tokenizer-mode", "slow"});  // vLLM 0.31 would refuse it
  EXPECT_TRUE(generic().check_config(c).ok());
  EXPECT_TRUE(generic().config_warnings(c).empty());
  const FlagCheck check = generic().check_flags(c, c.engine.flags, true);
  EXPECT_TRUE(check.checked_against.is_null());
  EXPECT_TRUE(check.findings.empty());
  EXPECT_FALSE(check.has_errors());
}

TEST(GenericEngine, ItsOutputSaysNothingOfItsWeights) {
  auto a = make_builtin_engine_adapter(EngineKind::kGeneric);
  auto r = a->new_report();
  r->observe("INFO vLLM server version 0.31.0, serving model m");
  r->observe("Mapped 291 tensors from the weight cache daemon");
  r->finish();
  EXPECT_TRUE(r->to_json().is_null()) << "no engine.vllm in status";
  const AttachWord w = r->attach_word();
  EXPECT_EQ(w.path, "");
  EXPECT_EQ(w.counted, "none");
  EXPECT_FALSE(a->reports_attach()) << "the daemons' records decide";
  EXPECT_FALSE(a->progress("Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01]"));
  EXPECT_TRUE(a->failure_rules().empty());
}

TEST(GenericEngine, ItsMemoryFlagReadinessAndPreload) {
  EXPECT_EQ(generic().memory_flag(), "--gpu-memory-utilization");
  EXPECT_EQ(generic().readiness_model(flags_of({"m", "--served-model-name", "n"})), "") << "readiness.model or none";
  EXPECT_FALSE(generic().passes_to_preload("--model"));
  FlagList flags = flags_of({"m", "--x"});
  generic().flags_for_preload(flags, {true, true, true, WeightsMode::kZeroCopy, ""});
  EXPECT_EQ(flags.words(), (std::vector<std::string>{"m", "--x"}));
}

}  // namespace
}  // namespace fr::supervisor
