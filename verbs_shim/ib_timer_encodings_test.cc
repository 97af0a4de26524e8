#include "verbs_shim/ib_timer_encodings.h"

#include <chrono>

#include "gtest/gtest.h"

namespace rdma_transport {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

TEST(AckTimeoutDurationTest, FollowsTheSpecificationAndClampsPast31) {
  EXPECT_EQ(AckTimeoutDuration(0), nanoseconds(4096));
  EXPECT_EQ(AckTimeoutDuration(14), nanoseconds(67'108'864));  // perftest's
  EXPECT_EQ(AckTimeoutDuration(18), nanoseconds(1'073'741'824));
  EXPECT_EQ(AckTimeoutDuration(31), nanoseconds(int64_t{4096} << 31));
  EXPECT_EQ(AckTimeoutDuration(32), AckTimeoutDuration(31));
  EXPECT_EQ(AckTimeoutDuration(255), AckTimeoutDuration(31));
  EXPECT_EQ(AckTimeoutDuration(-1), AckTimeoutDuration(0));
  static_assert(AckTimeoutDuration(1) == nanoseconds(8192));
}

TEST(RnrNakDelayTest, FollowsTable45AndClampsPast31) {
  EXPECT_EQ(RnrNakDelay(0), microseconds(655'360));  // longest, not none
  EXPECT_EQ(RnrNakDelay(1), microseconds(10));
  EXPECT_EQ(RnrNakDelay(12), microseconds(640));
  EXPECT_EQ(RnrNakDelay(14), microseconds(1'280));
  EXPECT_EQ(RnrNakDelay(31), microseconds(491'520));
  EXPECT_EQ(RnrNakDelay(32), RnrNakDelay(31));
  static_assert(RnrNakDelay(2) == microseconds(20));
}

}  // namespace
}  // namespace rdma_transport
