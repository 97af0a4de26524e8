// RdmaPipeline: a call's own work requests outstanding, counted across
// posts with other callers' sequences between them, retired in part and
// whole, the ring reused past its size.
#include "transport/rdma_pipeline.h"

#include "gtest/gtest.h"

namespace rdma_transport {
namespace {

TEST(RdmaPipelineTest, CountsItsOwnWorkRequestsUntilTheyComplete) {
  RdmaPipeline pipeline;
  pipeline.Reset(8);
  EXPECT_TRUE(pipeline.idle());
  EXPECT_EQ(pipeline.room(), 8u);
  pipeline.Posted(10, 3);  // 10, 11, 12
  pipeline.Posted(15, 2);  // 15, 16 (13, 14: somebody else's)
  EXPECT_EQ(pipeline.outstanding(), 5u);
  EXPECT_EQ(pipeline.room(), 3u);
  pipeline.Retire(10);  // nothing of ours below 10
  EXPECT_EQ(pipeline.outstanding(), 5u);
  pipeline.Retire(12);  // 10 and 11: part of the first post
  EXPECT_EQ(pipeline.outstanding(), 3u);
  pipeline.Retire(12);  // again: no change
  EXPECT_EQ(pipeline.outstanding(), 3u);
  pipeline.Retire(15);  // 12 (13, 14 are not ours)
  EXPECT_EQ(pipeline.outstanding(), 2u);
  pipeline.Retire(17);
  EXPECT_TRUE(pipeline.idle());
  EXPECT_EQ(pipeline.room(), 8u);
}

TEST(RdmaPipelineTest, OneCompletionRetiresSeveralPosts) {
  RdmaPipeline pipeline;
  pipeline.Reset(4);
  pipeline.Posted(0, 1);
  pipeline.Posted(1, 1);
  pipeline.Posted(2, 2);
  EXPECT_EQ(pipeline.room(), 0u);
  pipeline.Retire(100);
  EXPECT_TRUE(pipeline.idle());
}

TEST(RdmaPipelineTest, TheRingWrapsAndClearForgets) {
  RdmaPipeline pipeline;
  pipeline.Reset(3);
  uint64_t seq = 0;
  for (int round = 0; round < 10; ++round) {
    pipeline.Posted(seq, 1);
    pipeline.Posted(seq + 1, 2);
    EXPECT_EQ(pipeline.room(), 0u) << round;
    pipeline.Retire(seq + 1);
    EXPECT_EQ(pipeline.outstanding(), 2u) << round;
    pipeline.Posted(seq + 3, 1);
    pipeline.Retire(seq + 4);
    EXPECT_TRUE(pipeline.idle()) << round;
    seq += 4;
  }
  pipeline.Posted(seq, 3);
  pipeline.Clear();
  EXPECT_TRUE(pipeline.idle());
  EXPECT_EQ(pipeline.room(), 3u);
}

}  // namespace
}  // namespace rdma_transport
