// The soak as a test: FR_SOAK_CYCLES (200), FR_SOAK_SIZE (16M), FR_SOAK_SEED (random, printed).
// scripts/soak.sh runs it at the documented large size.
#include <gtest/gtest.h>

#include "soak/soak.h"

namespace fr::soak {
namespace {

TEST(Soak, RestartLoopUnderRandomFaults) {
  Soak s(Params::from_env());
  s.run();
}

}  // namespace
}  // namespace fr::soak
