#include "supervisor/flags.h"

#include <gtest/gtest.h>

#include "supervisor/engines/engine_kind.h"
#include "supervisor/flag_words.h"

namespace fr::supervisor {
namespace {

using Words = std::vector<std::string>;

using testing::flags_of;

// The word-level forms the cases below are written in: a push merged into the current flags, and the
// daemon-affecting flags of a change under a kind's built-in rules.
Words merge(const Words& current, const Words& push, PushKind kind) {
  return flags_of(current).merged(flags_of(push), kind).words();
}
Words affecting(EngineKind kind, const Words& a, const Words& b, const Words& extra = {}) {
  return daemon_affecting_changes(builtin_engine_adapter(kind).flag_rules(), flags_of(a), flags_of(b), extra);
}

Words split(const std::string& s) {
  auto r = split_flags(s);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : Words{};
}

// ---- split_flags

TEST(SplitFlags, Whitespace) {
  EXPECT_EQ(split("  --max-num-seqs 128\t--enforce-eager\n"), (Words{"--max-num-seqs", "128", "--enforce-eager"}));
  EXPECT_EQ(split(""), Words{});
}

TEST(SplitFlags, SingleQuotesAreLiteral) {
  EXPECT_EQ(split(R"(--hf-overrides '{"a": "b c"}' --x 'it\s')"),
            (Words{"--hf-overrides", R"({"a": "b c"})", "--x", R"(it\s)"}));
}

TEST(SplitFlags, DoubleQuotesEscapeOnlyShellSpecials) {
  EXPECT_EQ(split(R"(--p "a \"b\" \\ \n $HOME")"), (Words{"--p", R"(a "b" \ \n $HOME)"}));
}

TEST(SplitFlags, BackslashOutsideQuotes) {
  EXPECT_EQ(split(R"(a\ b c\"d)"), (Words{"a b", "c\"d"}));
  EXPECT_EQ(split("--x \\\n1"), (Words{"--x", "1"}));  // line continuation
}

TEST(SplitFlags, QuotesJoinAdjacentTextAndKeepEmptyWords) {
  EXPECT_EQ(split(R"(--a=x'y z'"w" '' "")"), (Words{"--a=xy zw", "", ""}));
}

TEST(SplitFlags, NoExpansion) { EXPECT_EQ(split("$HOME ~ *.json `id`"), (Words{"$HOME", "~", "*.json", "`id`"})); }

TEST(SplitFlags, UnterminatedQuoteIsAnError) {
  for (const char* s : {"--x 'abc", "--x \"abc", "--x \"a\\\""}) {
    auto r = split_flags(s);
    ASSERT_FALSE(r.ok()) << s;
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
    EXPECT_NE(r.error().message.find("unterminated"), std::string::npos) << r.error().message;
  }
}

TEST(SplitFlags, TrailingBackslashIsAnError) {
  auto r = split_flags("--x \\");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
}

// ---- parse_flag_list / to_words

TEST(FlagList, NamesValuesAndInlineValues) {
  auto f = parse_flag_list({"--a", "1", "2", "--b=x=y", "--c", "-tp", "2"});
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].name, "--a");
  EXPECT_EQ(f[0].values, (Words{"1", "2"}));
  EXPECT_EQ(f[1].name, "--b");
  EXPECT_EQ(f[1].values, Words{"x=y"});
  EXPECT_TRUE(f[1].inline_value);
  EXPECT_EQ(f[2].name, "--c");
  EXPECT_TRUE(f[2].values.empty());
  EXPECT_EQ(f[3].name, "-tp");
}

TEST(FlagList, LeadingPositionalHasAnEmptyName) {
  auto f = parse_flag_list({"meta-llama/Llama-3.1-8B", "--dtype", "bfloat16"});
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].name, "");
  EXPECT_EQ(f[0].values, Words{"meta-llama/Llama-3.1-8B"});
}

TEST(FlagList, NegativeNumbersAreValues) {
  auto f = parse_flag_list({"--seed", "-1", "--temp", "-.5", "--in", "-"});
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].values, Words{"-1"});
  EXPECT_EQ(f[1].values, Words{"-.5"});
  EXPECT_EQ(f[2].values, Words{"-"});
}

TEST(FlagList, ToWordsRoundTrips) {
  for (const Words& w : {Words{"model", "--a", "1", "--b=2", "--c", "--d", "x", "y"}, Words{"--x=1", "2", "--y"},
                         Words{"a", "b", "--x=", "--y=1=2", "-"}, Words{}}) {
    EXPECT_EQ(to_words(parse_flag_list(w)), w);
    EXPECT_EQ(flags_of(w).words(), w);
  }
}

// ---- FlagList: read once at the boundary

TEST(FlagList, FromWordsRefusesAControlCharacterNamingTheWord) {
  auto r = FlagList::from_words({"--x", "1", "--name", std::string("a\0b", 3)}, "engine.flags");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
  EXPECT_EQ(r.error().message.rfind("engine.flags[3] ", 0), 0u) << r.error().message;
  EXPECT_NE(r.error().message.find("\\0 at byte 1"), std::string::npos) << r.error().message;
}

TEST(FlagList, LookupsGoByCanonicalNameAndTheLastOccurrence) {
  const FlagList f = flags_of({"org/model", "-tp", "2", "--max_num_seqs", "8", "--max-num-seqs=16", "--eager"});
  EXPECT_EQ(f.positional(), "org/model");
  EXPECT_TRUE(f.has("--tensor-parallel-size"));
  EXPECT_EQ(f.value("--tensor-parallel-size"), "2");
  EXPECT_EQ(f.value("--max-num-seqs"), "16");
  EXPECT_TRUE(f.has("--eager"));
  EXPECT_EQ(f.value("--eager"), "");
  EXPECT_FALSE(f.has("--dtype"));
  EXPECT_EQ(flags_of({"--model", "m"}).positional(), "");
}

TEST(FlagList, WithoutDropsEverySpellingAndWithAppends) {
  const FlagList f = flags_of({"m", "--gpu_memory_utilization", "0.9", "--x", "--gpu-memory-utilization=0.5"});
  const FlagList g = f.without("--gpu-memory-utilization").with({"--gpu-memory-utilization", {"0.7"}, false});
  EXPECT_EQ(g.words(), (Words{"m", "--x", "--gpu-memory-utilization", "0.7"}));
  EXPECT_EQ(g.value("--gpu-memory-utilization"), "0.7");
  EXPECT_EQ(f.without("--nope"), f);
  EXPECT_EQ(flags_of({"m"}).without(""), flags_of({"m"}));  // the positional is not a flag to drop
}

TEST(FlagList, EqualListsHaveEqualWords) {
  EXPECT_EQ(flags_of({"--x", "1"}), flags_of({"--x", "1"}));
  EXPECT_NE(flags_of({"--x", "1"}), flags_of({"--x=1"}));  // what the engine is given differs
  EXPECT_EQ(FlagList(), flags_of({}));
  EXPECT_TRUE(FlagList().empty());
}

// ---- FlagList::merged

const Words kCurrent{"meta-llama/Llama-3.1-8B", "--dtype", "bfloat16", "--max-num-seqs", "64", "--enforce-eager"};

TEST(MergeFlags, ReplaceTakesThePush) {
  EXPECT_EQ(merge(kCurrent, {"--max-num-seqs", "128"}, PushKind::kReplace), (Words{"--max-num-seqs", "128"}));
}

TEST(MergeFlags, AddOverridesInPlace) {
  EXPECT_EQ(merge(kCurrent, {"--max-num-seqs", "128"}, PushKind::kAdd),
            (Words{"meta-llama/Llama-3.1-8B", "--dtype", "bfloat16", "--max-num-seqs", "128", "--enforce-eager"}));
}

TEST(MergeFlags, AddAppendsNewFlags) {
  Words out = merge(kCurrent, {"--max-model-len", "4096"}, PushKind::kAdd);
  Words want = kCurrent;
  want.insert(want.end(), {"--max-model-len", "4096"});
  EXPECT_EQ(out, want);
}

TEST(MergeFlags, AddMatchesInlineAndSpacedForms) {
  EXPECT_EQ(merge({"--x", "1", "--y"}, {"--x=2"}, PushKind::kAdd), (Words{"--x=2", "--y"}));
  EXPECT_EQ(merge({"--x=1", "--y"}, {"--x", "2"}, PushKind::kAdd), (Words{"--x", "2", "--y"}));
}

TEST(MergeFlags, AddMatchesAliasesAndUnderscores) {
  EXPECT_EQ(merge({"--tensor-parallel-size", "1", "--y"}, {"-tp", "2"}, PushKind::kAdd),
            (Words{"-tp", "2", "--y"}));
  EXPECT_EQ(merge({"--max_num_seqs", "8"}, {"--max-num-seqs", "16"}, PushKind::kAdd),
            (Words{"--max-num-seqs", "16"}));
}

TEST(MergeFlags, AddCollapsesRepeatedFlag) {
  EXPECT_EQ(merge({"--x", "1", "--y", "--x", "3"}, {"--x", "2"}, PushKind::kAdd), (Words{"--x", "2", "--y"}));
}

TEST(MergeFlags, AddReplacesThePositionalModel) {
  EXPECT_EQ(merge(kCurrent, {"other/model"}, PushKind::kAdd)[0], "other/model");
  EXPECT_EQ(merge({"--dtype", "auto"}, {"m"}, PushKind::kAdd), (Words{"m", "--dtype", "auto"}));
}

TEST(MergeFlags, RemoveByName) {
  EXPECT_EQ(merge(kCurrent, {"--enforce-eager", "--dtype"}, PushKind::kRemove),
            (Words{"meta-llama/Llama-3.1-8B", "--max-num-seqs", "64"}));
}

TEST(MergeFlags, RemoveIgnoresValuesAndMatchesAliases) {
  EXPECT_EQ(merge({"--max-num-seqs", "64", "--quantization", "fp8"}, {"--max-num-seqs", "999", "-q"},
                        PushKind::kRemove),
            Words{});
}

TEST(MergeFlags, RemoveNeverDropsThePositional) {
  EXPECT_EQ(merge(kCurrent, {"meta-llama/Llama-3.1-8B"}, PushKind::kRemove), kCurrent);
}

TEST(MergeFlags, RemoveAbsentFlagChangesNothing) {
  EXPECT_EQ(merge(kCurrent, {"--nope"}, PushKind::kRemove), kCurrent);
}

// ---- daemon_affecting_changes

TEST(DaemonAffecting, EngineOnlyFlagsNeedNoDaemonReload) {
  Words b = merge(
      kCurrent,
      {"--max-num-seqs", "128", "--max-model-len", "4096", "--tokenizer", "t", "--trust-remote-code", "--seed", "3"},
      PushKind::kAdd);
  EXPECT_TRUE(affecting(EngineKind::kVllm, kCurrent, b).empty());
}

TEST(DaemonAffecting, DtypeChange) {
  Words b = merge(kCurrent, {"--dtype", "float16"}, PushKind::kAdd);
  EXPECT_EQ(affecting(EngineKind::kVllm, kCurrent, b), Words{"--dtype"});
}

TEST(DaemonAffecting, AddedOrRemovedFlagCounts) {
  Words b = merge(kCurrent, {"--quantization", "fp8"}, PushKind::kAdd);
  EXPECT_EQ(affecting(EngineKind::kVllm, kCurrent, b), Words{"--quantization"});
  EXPECT_EQ(affecting(EngineKind::kVllm, b, kCurrent), Words{"--quantization"});
}

TEST(DaemonAffecting, AliasesAndSpellingsAreTheSameFlag) {
  EXPECT_TRUE(affecting(EngineKind::kVllm, {"-tp", "2", "-q", "fp8"},
                                       {"--tensor-parallel-size=2", "--quantization", "fp8"})
                  .empty());
  EXPECT_TRUE(affecting(EngineKind::kVllm, {"--load_format", "x"}, {"--load-format=x"}).empty());
  EXPECT_EQ(affecting(EngineKind::kVllm, {"-tp", "2"}, {"--tensor-parallel-size", "4"}),
            Words{"--tensor-parallel-size"});
}

TEST(DaemonAffecting, PositionalModelIsTheModelFlag) {
  EXPECT_TRUE(affecting(EngineKind::kVllm, {"m", "--x"}, {"--model", "m", "--x"}).empty());
  EXPECT_EQ(affecting(EngineKind::kVllm, {"m1", "--x"}, {"m2", "--x"}), Words{"--model"});
}

TEST(DaemonAffecting, ParallelismAndRevision) {
  EXPECT_EQ(affecting(EngineKind::kVllm, {"-pp", "1", "--revision", "a", "-dp", "1"},
                                     {"-pp", "2", "--revision", "b", "-dp", "2"}),
            (Words{"--revision", "--pipeline-parallel-size", "--data-parallel-size"}));
}

TEST(DaemonAffecting, GenericEngineOnlyCountsExtraFlags) {
  Words a{"--dtype", "F32", "--model", "a"}, b{"--dtype", "BF16", "--model", "b"};
  EXPECT_TRUE(affecting(EngineKind::kGeneric, a, b).empty());
  EXPECT_EQ(affecting(EngineKind::kGeneric, a, b, {"--dtype"}), Words{"--dtype"});
}

TEST(RedactFlags, SecretValuesAreReplacedInBothSpellings) {
  EXPECT_EQ(redact_flags({"serve", "--api-key", "sk-123", "--hf-token=hf_abc", "--port", "8000"}),
            (Words{"serve", "--api-key", "<redacted>", "--hf-token=<redacted>", "--port", "8000"}));
  EXPECT_EQ(redact_flags({"--DB_PASSWORD", "x", "--auth", "y"}), (Words{"--DB_PASSWORD", "<redacted>", "--auth", "<redacted>"}));
}

TEST(RedactFlags, LookalikesAndValuelessSecretFlagsAreKept) {
  Words w{"--tokenizer", "t", "--max-num-batched-tokens", "4096", "--keyfile-path", "/k", "--api-key", "--x"};
  EXPECT_EQ(redact_flags(w), w);
}

TEST(RedactFlags, EveryValueOfAMultiValueSecretFlagAndOtherSpellings) {
  EXPECT_EQ(redact_flags({"--api-key", "-k1", "k2", "--apikey=k3", "--api-keys", "k4", "--port", "1"}),
            (Words{"--api-key", "<redacted>", "<redacted>", "--apikey=<redacted>", "--api-keys", "<redacted>", "--port", "1"}));
}

TEST(CheckFlagWords, ARefusedSecretValueIsNotQuoted) {
  auto st = check_flag_words({"--api-key", "sk-abc\ndef"}, "flags");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("flags[1]"), std::string::npos) << st.error().message;
  EXPECT_EQ(st.error().message.find("sk-abc"), std::string::npos) << st.error().message;
}

TEST(SplitFlags, AnErrorDoesNotQuoteTheString) {
  auto w = split_flags("--api-key sk-secret-x \\");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().message.find("sk-secret-x"), std::string::npos) << w.error().message;
}

}  // namespace
}  // namespace fr::supervisor
