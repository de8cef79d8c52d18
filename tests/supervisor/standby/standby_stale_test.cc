// When a standby no longer matches the start it would serve (standby/stale.h): its flags, its config
// besides them, the model's files; and the disk is read only once the flags and config match.
#include <gtest/gtest.h>

#include "supervisor/standby/stale.h"

namespace fr::supervisor {
namespace {

FlagList stale_flags(std::vector<std::string> words) { return *FlagList::from_words(std::move(words), "flags"); }

TEST(StandbyStale, AStandbyOnTheSameFlagsConfigAndFilesMatches) {
  Config c;
  c.engine.command = {"engine"};
  const FlagList f = stale_flags({"--model", "m"});
  const std::map<std::string, FileIdentity> files;  // no model files then, none now
  int reads = 0;
  EXPECT_EQ(standby_stale_reason(f, standby_launch_config(c), files, f, c, [&] { ++reads; return files; }), "");
  EXPECT_EQ(reads, 1);
}

TEST(StandbyStale, OtherFlagsOrAReReadConfigMakeItStaleWithoutReadingTheDisk) {
  Config c;
  c.engine.working_dir = "/srv/a";
  const FlagList f = stale_flags({"--model", "m"});
  const auto launch = standby_launch_config(c);
  int reads = 0;
  auto files_now = [&] { ++reads; return std::map<std::string, FileIdentity>{}; };
  EXPECT_EQ(standby_stale_reason(f, launch, {}, stale_flags({"--model", "n"}), c, files_now),
            "the standby was started on other flags");
  Config reread = c;
  reread.engine.working_dir = "/srv/b";
  EXPECT_EQ(standby_stale_reason(f, launch, {}, f, reread, files_now),
            "engine.working_dir changed since the standby started (the config was re-read)");
  reread = c;
  reread.memory.utilization = 0.5;
  EXPECT_EQ(standby_stale_reason(f, launch, {}, f, reread, files_now),
            "memory.utilization changed since the standby started (the config was re-read)");
  EXPECT_EQ(reads, 0);
}

TEST(StandbyStale, AChangedModelFileMakesItStale) {
  Config c;
  const FlagList f;
  std::map<std::string, FileIdentity> then;
  then["/m/config.json"] = FileIdentity{};
  const std::string why = standby_stale_reason(f, standby_launch_config(c), then, f, c, [] { return std::map<std::string, FileIdentity>{}; });
  EXPECT_TRUE(why.starts_with("the checkpoint changed since the standby started (")) << why;
  EXPECT_NE(why.find("/m/config.json"), std::string::npos) << why;
}

}  // namespace
}  // namespace fr::supervisor
