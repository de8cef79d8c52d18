// data/vllm.toml as compiled in, and the errors of a broken rules file.
#include "supervisor/engines/vllm/vllm_rules.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "support/harness.h"

namespace fr::supervisor {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

TEST(VllmRules, TheBuiltInFileParses) {
  const auto& r = builtin_vllm_rules();
  EXPECT_EQ(r.newest.str(), "0.31.0");
  EXPECT_TRUE(contains(r.daemon_flags, "--tensor-parallel-size"));
  EXPECT_FALSE(contains(r.daemon_flags, "--max-model-len")) << "max-model-len does not change the weights";
  EXPECT_TRUE(contains(r.preload_pass, "--max-num-seqs"));
  EXPECT_GE(r.removed.size(), 15u);
  EXPECT_FALSE(r.failures.empty());
  EXPECT_FALSE(r.reports.empty());
  EXPECT_TRUE(contains(r.preload_quantization.allow, "modelopt_fp4"));
  EXPECT_FALSE(contains(r.preload_quantization.allow, "awq"));
  EXPECT_TRUE(contains(r.preload_quantization.checkpoint_allow, "modelopt:NVFP4"));
  EXPECT_EQ(r.preload_extra_config_keys,
            (std::vector<std::string>{"socket_path", "socket_dir", "mode", "fallback", "connect_timeout_s", "state_timeout_s"}));
}

TEST(VllmRules, AnOperatorFileWidensThePreloadAllowlists) {
  test::TempDir dir;
  std::string path = dir / "mine.toml";
  std::ofstream(path) << "[preload]\nextra_config_keys = [\"is_draft\"]\n[preload.quantization]\nallow = [\"fp8_per_block\"]\n";
  auto r = load_vllm_rules(path);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(contains(r->preload_quantization.allow, "fp8_per_block"));
  EXPECT_TRUE(contains(r->preload_quantization.allow, "fp8"));
  EXPECT_TRUE(contains(r->preload_extra_config_keys, "is_draft"));
  auto bad = parse_vllm_rules("[preload.quantization]\nallowed = [\"x\"]\n", "e.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message.rfind("e.toml:2: preload.quantization.allowed: unknown key", 0), 0u) << bad.error().message;
}

TEST(VllmVersion, ParsesReleasesAndBuilds) {
  EXPECT_EQ(VllmVersion::parse("0.31.0")->str(), "0.31.0");
  EXPECT_EQ(VllmVersion::parse("v0.31.1rc2")->str(), "0.31.1");
  EXPECT_EQ(VllmVersion::parse("0.30.1.dev12+gabc")->str(), "0.30.1");
  EXPECT_EQ(VllmVersion::parse("0.31")->str(), "0.31.0");
  EXPECT_FALSE(VllmVersion::parse("latest"));
  EXPECT_LT(*VllmVersion::parse("0.9.2"), *VllmVersion::parse("0.29.0"));
}

TEST(VllmRules, AnUnknownKeyNamesFileLineAndKey) {
  auto r = parse_vllm_rules("[[removed]]\nflag = \"--x\"\nversion = \"0.31.0\"\nwhy = \"typo\"\n", "extra.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message.rfind("extra.toml:4: removed[0].why: unknown key", 0), 0u) << r.error().message;
}

TEST(VllmRules, ABadVersionAndAnUnknownCauseAreErrors) {
  auto v = parse_vllm_rules("[[removed]]\nenv = \"VLLM_X\"\nversion = \"soon\"\n", "e.toml");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error().message.find("e.toml:3: removed[0].version: expected a vLLM version"), std::string::npos) << v.error().message;
  auto c = parse_vllm_rules("[[failure]]\ncontains = [\"x\"]\ncause = \"oops\"\n", "e.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("e.toml:3: failure[0].cause: unknown cause \"oops\""), std::string::npos) << c.error().message;
}

// Every section reads its entries the same way: the error names file:line, section[index].key.
TEST(VllmRules, AWrongTypeInALaterSectionNamesSectionEntryAndKey) {
  auto r = parse_vllm_rules(
      "[[removed]]\nenv = \"VLLM_X\"\nversion = \"0.31.0\"\n"
      "[[report]]\nfield = \"version\"\nafter = \"v \"\n"
      "[[report]]\nfield = \"model_runner\"\nafter = 7\n",
      "e.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "e.toml:9: report[1].after: expected a string");
  auto g = parse_vllm_rules("[[added]]\nflags = [\"--a\"]\nversion = \"0.30.0\"\n"
                            "[[gated]]\nwhen_any = [\"--b\"]\nunless = \"--c\"\nversion = \"0.31.0\"\nseverity = [\"error\"]\n",
                            "e.toml");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().message, "e.toml:8: gated[0].severity: expected a string");
}

TEST(VllmRules, AMissingOrEmptyRequiredKeyIsNamed) {
  auto missing = parse_vllm_rules("[[added]]\nflags = [\"--a\"]\nversion = \"0.30.0\"\n[[added]]\nflags = [\"--b\"]\n", "e.toml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message.rfind("e.toml:4: added[1].version: required", 0), 0u) << missing.error().message;
  auto empty = parse_vllm_rules("[[preload.refuse]]\nflag = \"\"\nwhy = \"w\"\n", "e.toml");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().message, "e.toml:2: preload.refuse[0].flag: must not be empty");
  auto pattern = parse_vllm_rules("[[failure]]\ncontains = [\"a\", \"\"]\ncause = \"bad_flags\"\n", "e.toml");
  ASSERT_FALSE(pattern.ok());
  EXPECT_EQ(pattern.error().message, "e.toml:2: failure[0].contains: an empty string matches every line");
}

TEST(VllmRules, ARuleNamingNoOrTwoSubjectsIsAnError) {
  auto two = parse_vllm_rules("[[removed]]\nflag = \"--a\"\nenv = \"VLLM_A\"\nversion = \"0.31.0\"\n", "e.toml");
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.error().message, "e.toml:1: removed[0].flag: exactly one of flag, env, command is required");
  auto neither = parse_vllm_rules("[[report]]\nfield = \"version\"\ncontains = \"x\"\n", "e.toml");
  ASSERT_FALSE(neither.ok());
  EXPECT_EQ(neither.error().message, "e.toml:1: report[0].after: give either `after`, or `contains` with `value`");
}

TEST(VllmRules, AnOperatorFileIsAppended) {
  test::TempDir dir;
  std::string path = dir / "mine.toml";
  std::ofstream(path) << "newest = \"0.32.0\"\n[[removed]]\nflag = \"--old_thing\"\nversion = \"0.32.0\"\nuse = \"--new-thing\"\n";
  auto r = load_vllm_rules(path);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->newest.str(), "0.32.0");
  EXPECT_EQ(r->removed.back().flag, "--old-thing");
  EXPECT_EQ(r->removed.size(), builtin_vllm_rules().removed.size() + 1);
  auto missing = load_vllm_rules(dir / "absent.toml");
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace fr::supervisor
