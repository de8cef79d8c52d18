// parse_engine_progress(): the engine's own progress lines (docs/supervisor.md, "Engine progress").
#include "supervisor/engine_progress.h"

#include "supervisor/engines/vllm/vllm_rules.h"

#include <gtest/gtest.h>

namespace fr::supervisor {
namespace {

TEST(EngineProgress, ALineAnywhereInTheOutputIsRead) {
  auto p = parse_engine_progress("[2026-01-01 00:00:00.000] [info] fastrestart-progress: phase=disk_read done=268435456 total=536870912 unit=bytes");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->phase, "disk_read");
  EXPECT_EQ(p->done, 268435456u);
  EXPECT_EQ(p->total, 536870912u);
  EXPECT_EQ(p->text(), "disk_read 50% (256 MiB of 512 MiB)");
}

TEST(EngineProgress, OtherUnitsAreCounts) {
  auto p = parse_engine_progress("fastrestart-progress: phase=load_shards done=2 total=4 unit=shards rank=0");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->text(), "load_shards 2/4 shards");
  EXPECT_EQ(parse_engine_progress("fastrestart-progress: phase=x done=1 total=3")->text(), "x 1/3");
  EXPECT_EQ(parse_engine_progress("fastrestart-progress: phase=w done=3 total=4 unit=bytes extra=1")->text(),
            "w 75% (0 MiB of 0 MiB)");
}

// Found by fuzz_engine_line (fuzz/regressions/fuzz_engine_line/): done * 100 passed 2^64 and wrapped, so
// an engine reporting sizes above 184 PB (any number it likes) showed 0% when it was done.
TEST(EngineProgress, TheShareIsExactForSizesNear2To64) {
  auto p = parse_engine_progress("fastrestart-progress: phase=disk_read done=184467440737095517 total=184467440737095517 unit=bytes");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->text(), "disk_read 100% (171798692 GiB of 171798692 GiB)");
  p = parse_engine_progress("fastrestart-progress: phase=d done=9223372036854775808 total=18446744073709551615 unit=bytes");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->text().substr(0, 5), "d 50%");
}

TEST(EngineProgress, MalformedLinesAreIgnored) {
  for (const char* l : {"load path=disk weight_bytes=1", "fastrestart-progress:", "fastrestart-progress: done=1 total=2",
                        "fastrestart-progress: phase=a done=3 total=2", "fastrestart-progress: phase=a done=-1 total=2",
                        "fastrestart-progress: phase=a done=1", "fastrestart-progress: phase=a done=1x total=2",
                        "fastrestart-progress: phase=a b c done=1 total=2", "fastrestart-progress: phase=$(x) done=1 total=2"})
    EXPECT_FALSE(parse_engine_progress(l)) << l;
}

// vLLM's tqdm bar, as data/vllm.toml describes it (vllm/model_executor/model_loader/weight_utils.py _BAR_FORMAT).
TEST(EngineProgress, VllmsShardBarIsReadThroughTheBuiltInRules) {
  const auto& pats = builtin_vllm_rules().progress;
  auto p = parse_progress_pattern(pats, "(EngineCore_DP0 pid=7) Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.50it/s]");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->text(), "load_shards 2/4 shards");
  EXPECT_FALSE(parse_progress_pattern(pats, "Loading safetensors checkpoint shards:   0% Completed | 0/x [00:00<?, ?it/s]"));
  EXPECT_FALSE(parse_progress_pattern(pats, "INFO 50% Completed | 2/4"));
}

}  // namespace
}  // namespace fr::supervisor
