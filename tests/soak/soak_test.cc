// The soak as a test: FR_SOAK_CYCLES (200; 80 with a standby), FR_SOAK_SIZE (16M), FR_SOAK_SEED (random,
// printed), FR_SOAK_STANDBY_LEVEL (with a standby: pre_gpu or warmed, from the seed by default).
// scripts/soak.sh runs it at the documented large size.
#include <gtest/gtest.h>

#include "soak/soak.h"

namespace fr::soak {
namespace {

TEST(Soak, RestartLoopUnderRandomFaults) {
  Soak s(Params::from_env());
  s.run();
}

// restart.start = ["standby", "warm", "cold"]: kills and restarts release the parked standby, which is
// itself killed, replaced, pushed past and given faults (docs/reliability.md, "Soak with a standby").
TEST(Soak, RestartLoopWithAStandby) {
  Soak s(Params::from_env(true));
  s.run();
}

}  // namespace
}  // namespace fr::soak
