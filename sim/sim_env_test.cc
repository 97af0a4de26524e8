// SimEnv (sim/sim_env.h): who takes part in virtual time, and which clock a
// wake time is on. A thread that waits on the virtual clock without taking
// part, or a wake time from the real clock, would let time move under a
// waiter or end its wait at once: both abort, saying why and what to use.
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "verbs_shim/env.h"
#include "verbs_shim/env_thread.h"

namespace rdma_transport::sim {
namespace {

using std::chrono::milliseconds;

class SimEnvDeathTest : public ::testing::Test {
 protected:
  // The fabric is made inside each death statement's child: the thread
  // that made it is the one that runs the statement.
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(SimEnvDeathTest, AThreadThatDoesNotTakePartAbortsNamingRunInThread) {
  EXPECT_DEATH(
      {
        Fabric fabric;
        Env& env = fabric.env();
        std::thread stranger(
            [&] { env.SleepUntil(env.DeadlineIn(milliseconds(1))); });
        stranger.join();
      },
      "without taking part in its time.*RunInThread");
}

TEST_F(SimEnvDeathTest, AWakeTimeOnTheRealClockAborts) {
  EXPECT_DEATH(
      {
        Fabric fabric;
        Env& env = fabric.env();
        env.Wait(env.PrepareWait(), {}, Env::Real().DeadlineIn(milliseconds(1)),
                 WaitKind::kBlock);
      },
      "wake time on the real clock");
}

TEST_F(SimEnvDeathTest, JoiningWithoutBeingCountedAborts) {
  EXPECT_DEATH(
      {
        Fabric fabric;
        Env& env = fabric.env();
        std::thread stranger([&] { env.JoinAsParticipant(); });
        stranger.join();
      },
      "no AddParticipant\\(\\) counted it");
}

TEST(SimEnvTest, ThreadsStartedWithRunInThreadTakePartAndTimeWaitsForThem) {
  Fabric fabric;
  Env& env = fabric.env();
  const Deadline start = env.Now();
  // Two threads sleep in virtual time; the clock moves to each wake in turn
  // and the creating thread's wait for them counts as blocked.
  EnvFuture<Deadline> first = RunInThread(env, [&] {
    env.SleepUntil(start + milliseconds(5));
    return env.Now();
  });
  EnvFuture<Deadline> second = RunInThread(env, [&] {
    env.SleepUntil(start + milliseconds(9));
    return env.Now();
  });
  EXPECT_EQ(first.Get() - start, milliseconds(5));
  EXPECT_EQ(second.Get() - start, milliseconds(9));
  // Both left: this thread alone moves the clock again.
  env.SleepUntil(start + milliseconds(20));
  EXPECT_EQ(env.Now() - start, milliseconds(20));
}

TEST(SimEnvTest, TheVirtualClockStartsAtTheVirtualEpoch) {
  Fabric fabric;
  EXPECT_EQ(fabric.env().Now(), kVirtualEpoch);
  EXPECT_TRUE(
      OnClockOf(fabric.env().DeadlineIn(milliseconds(1)), fabric.env().Now()));
  EXPECT_FALSE(
      OnClockOf(Env::Real().DeadlineIn(milliseconds(1)), fabric.env().Now()));
  EXPECT_TRUE(OnClockOf(kNoDeadline, fabric.env().Now()));
  EXPECT_TRUE(OnClockOf(kNoDeadline, Env::Real().Now()));
}

}  // namespace
}  // namespace rdma_transport::sim
