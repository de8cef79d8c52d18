// The engine kinds' registry (engines/registry.cc): the names engine.kind accepts, an adapter per kind.
#include <gtest/gtest.h>

#include <string>

#include "supervisor/engines/engine_kind.h"

namespace fr::supervisor {
namespace {

TEST(EngineKinds, EveryRegisteredKindIsAcceptedByItsNameAndMakesItsAdapter) {
  ASSERT_EQ(engine_kinds().size(), engine_kind_names().size());
  ASSERT_GE(engine_kinds().size(), 2u);
  EXPECT_STREQ(engine_kind_names()[0], "generic") << "the first entry is the default";
  for (const auto& entry : engine_kinds()) {
    const std::string name = entry.kind.name();
    auto c = parse_config("[engine]\ncommand = [\"x\"]\nkind = \"" + name + "\"\n[weights]\nmode = \"off\"\n", "/etc/fastrestart/m.toml");
    ASSERT_TRUE(c.ok()) << name << ": " << c.error().message;
    EXPECT_EQ(c->engine.kind, entry.kind);
    EXPECT_EQ(engine_kind_name(c->engine.kind), name);
    auto adapter = make_engine_adapter(*c);
    ASSERT_TRUE(adapter.ok()) << adapter.error().message;
    EXPECT_EQ((*adapter)->kind(), entry.kind);
    EXPECT_EQ(make_builtin_engine_adapter(entry.kind)->kind(), entry.kind);
    EXPECT_EQ(&builtin_engine_adapter(entry.kind), &builtin_engine_adapter(entry.kind)) << "made once";
  }
}

TEST(EngineKinds, TheDefaultKindIsGeneric) {
  EXPECT_EQ(EngineKind(), EngineKind::kGeneric);
  EXPECT_FALSE(EngineKind::kGeneric == EngineKind::kVllm);
  auto c = parse_config("[engine]\ncommand = [\"x\"]\n[weights]\nmode = \"off\"\n", "/etc/fastrestart/m.toml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->engine.kind, EngineKind::kGeneric);
}

TEST(EngineKinds, AnUnknownKindNamesTheRegisteredOnes) {
  auto c = parse_config("[engine]\ncommand = [\"x\"]\nkind = \"sglang\"\n", "/etc/fastrestart/m.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message, "/etc/fastrestart/m.toml:3: engine.kind: must be one of \"generic\", \"vllm\", got \"sglang\"");
}

TEST(EngineKinds, AKindsRulesFileThatCannotBeReadNamesTheKey) {
  auto c = parse_config("[engine]\ncommand = [\"vllm\", \"serve\"]\nkind = \"vllm\"\n[weights]\nmode = \"off\"\n", "/etc/fastrestart/m.toml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  c->engine.vllm_rules = "/nonexistent/rules.toml";
  auto adapter = make_engine_adapter(*c);
  ASSERT_FALSE(adapter.ok());
  EXPECT_EQ(adapter.error().message.rfind("/etc/fastrestart/m.toml:1: engine.vllm_rules: open /nonexistent/rules.toml", 0), 0u)
      << adapter.error().message;
}

}  // namespace
}  // namespace fr::supervisor
