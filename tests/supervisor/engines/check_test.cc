// The check reply and the pushed flags of a check or reload request (engines/check.h), with the vLLM kind's checks.
#include "supervisor/engines/check.h"

#include <gtest/gtest.h>

#include "supervisor/engines/vllm/vllm_adapter.h"
#include "supervisor/flag_words.h"

namespace fr::supervisor {
namespace {

using nlohmann::json;
using testing::flags_of;
using Words = std::vector<std::string>;

const FlagList kCurrent = flags_of({"/m", "--dtype", "bfloat16", "--max-num-seqs", "8"});

Config config(EngineKind kind) {
  Config c;
  c.engine.kind = kind;
  c.engine.command = {"vllm", "serve"};
  c.engine.flags = kCurrent;
  return c;
}

TEST(VllmCheck, NoFlagsInTheRequestIsTheCurrentFlags) {
  auto r = pushed_flags(json{{"op", "check"}}, kCurrent, "check");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, kCurrent);
}

TEST(VllmCheck, AStringIsSplitAndMergedByMode) {
  auto add = pushed_flags(json{{"flags", "--max-num-seqs 4 --enforce-eager"}, {"mode", "add"}}, kCurrent, "check");
  ASSERT_TRUE(add.ok()) << add.error().message;
  EXPECT_EQ(add->words(), (Words{"/m", "--dtype", "bfloat16", "--max-num-seqs", "4", "--enforce-eager"}));
  auto rm = pushed_flags(json{{"flags", "--dtype"}, {"mode", "remove"}}, kCurrent, "check");
  ASSERT_TRUE(rm.ok()) << rm.error().message;
  EXPECT_EQ(rm->words(), (Words{"/m", "--max-num-seqs", "8"}));
  auto replace = pushed_flags(json{{"flags", json::array({"/n", "--dtype", "float16"})}}, kCurrent, "reload");
  ASSERT_TRUE(replace.ok()) << replace.error().message;
  EXPECT_EQ(replace->words(), (Words{"/n", "--dtype", "float16"}));
}

TEST(VllmCheck, ARequestReadOnceIsMergedTheSameWay) {
  auto req = parse_control_request(json{{"op", "reload"}, {"flags", "--max-num-seqs 4 --enforce-eager"}, {"mode", "add"}});
  ASSERT_TRUE(req.ok()) << req.error().message;
  EXPECT_EQ(pushed_flags(*req, kCurrent), *pushed_flags(to_json(*req), kCurrent, "reload"));
  EXPECT_EQ(pushed_flags(*req, kCurrent).words(), (Words{"/m", "--dtype", "bfloat16", "--max-num-seqs", "4", "--enforce-eager"}));
  EXPECT_EQ(pushed_flags(ControlRequest{"check", std::nullopt, PushKind::kReplace, true}, kCurrent), kCurrent);
}

TEST(VllmCheck, BadFlagsOrModeAreErrorsNamingTheField) {
  auto item = pushed_flags(json{{"flags", json::array({"--dtype", 16})}}, kCurrent, "reload");
  ASSERT_FALSE(item.ok());
  EXPECT_EQ(item.error().code, Errc::kInvalidArgument);
  EXPECT_EQ(item.error().message, "reload.flags[1]: expected a string, got number");
  auto kind = pushed_flags(json{{"flags", 16}}, kCurrent, "check");
  ASSERT_FALSE(kind.ok());
  EXPECT_EQ(kind.error().message, "check.flags: expected a string or an array of strings, got number");
  auto mode = pushed_flags(json{{"flags", "--x"}, {"mode", "append"}}, kCurrent, "check");
  ASSERT_FALSE(mode.ok());
  EXPECT_EQ(mode.error().message, "check.mode: expected \"replace\", \"add\" or \"remove\", got \"append\"");
  auto quote = pushed_flags(json{{"flags", "--x 'open"}}, kCurrent, "reload");
  ASSERT_FALSE(quote.ok());
  EXPECT_EQ(quote.error().message.rfind("reload.flags: ", 0), 0u) << quote.error().message;
}

TEST(VllmCheck, AGenericEngineHasNoRulesAndNoFindings) {
  Config c = config(EngineKind::kGeneric);
  json r = check_reply({c, builtin_engine_adapter(c.engine.kind), kCurrent}, kCurrent, true);
  EXPECT_EQ(r["ok"], true);
  EXPECT_EQ(r["kind"], "generic");
  EXPECT_TRUE(r["checked_against"].is_null());
  EXPECT_TRUE(r["findings"].empty());
  EXPECT_EQ(r["would"], "nothing");
}

TEST(VllmCheck, ARemovedFlagIsAnErrorAndAPushWouldBeRefused) {
  Config c = config(EngineKind::kVllm);
  const FlagList next = kCurrent.merged(flags_of({"--tokenizer-mode", "slow"}), PushKind::kAdd);
  VllmAdapter kind(builtin_vllm_rules());
  kind.note_reported_version("0.31.0");  // as an engine's startup line would
  json r = check_reply({c, kind, kCurrent}, next, true);
  EXPECT_EQ(r["checked_against"]["version"], "0.31.0");
  EXPECT_EQ(r["checked_against"]["source"], "reported by the engine at its last start");
  ASSERT_EQ(r["findings"].size(), 1u) << r.dump();
  EXPECT_EQ(r["findings"][0]["severity"], "error");
  EXPECT_EQ(r["findings"][0]["subject"], "--tokenizer-mode slow");
  EXPECT_EQ(r["would"], "refuse");
  EXPECT_EQ(r["flags"], next.words());
}

TEST(VllmCheck, WouldSaysWarmOrColdAndIsLeftOutWhenNotAsked) {
  Config c = config(EngineKind::kVllm);
  CheckInput in{c, builtin_engine_adapter(c.engine.kind), kCurrent};
  json warm = check_reply(in, flags_of({"/m", "--dtype", "bfloat16", "--max-num-seqs", "4"}), true);
  EXPECT_EQ(warm["would"], "restart the engine (warm)");
  EXPECT_TRUE(warm["daemon_affecting"].empty());
  json cold = check_reply(in, flags_of({"/m", "--dtype", "float16", "--max-num-seqs", "8"}), true);
  EXPECT_EQ(cold["would"], "reload the daemons (cold)");
  EXPECT_EQ(cold["daemon_affecting"], json::array({"--dtype"}));
  EXPECT_FALSE(check_reply(in, kCurrent, false).contains("would"));
}

}  // namespace
}  // namespace fr::supervisor
