// Env::Real() (verbs_shim/env.h): a wake time on a simulated fabric's
// virtual clock lies 146 years ahead of the real one; a wait given one
// aborts, saying so, instead of sleeping for ever.
#include "verbs_shim/env.h"

#include <chrono>

#include "gtest/gtest.h"

namespace rdma_transport {
namespace {

TEST(RealEnvTest, DeadlinesOfTheRealClockAreOnIt) {
  Env& env = Env::Real();
  EXPECT_TRUE(OnClockOf(env.DeadlineIn(std::chrono::seconds(1)), env.Now()));
  EXPECT_TRUE(OnClockOf(kNoDeadline, env.Now()));
  EXPECT_FALSE(OnClockOf(kVirtualEpoch, env.Now()));
  EXPECT_LT(env.Now(), kVirtualEpoch);
}

TEST(RealEnvDeathTest, AWakeTimeOnAVirtualClockAborts) {
  Env& env = Env::Real();
  EXPECT_DEATH(env.Wait(0, {}, kVirtualEpoch + std::chrono::seconds(1),
                        WaitKind::kBlock),
               "wake time on a simulated fabric's virtual clock");
}

}  // namespace
}  // namespace rdma_transport
