// SendQueueLedger: sequence numbers in wr_ids, selective signalling, room
// counted in order, and the bytes outstanding a watchdog allows time for.
#include "transport/send_queue_ledger.h"

#include <vector>

#include "gtest/gtest.h"
#include "transport/wr_id.h"

namespace rdma_transport {
namespace {

// `count` chained WRITEs of `bytes` each, none asked to be signalled.
struct Chain {
  Chain(uint32_t count, uint32_t bytes) : wrs(count), sges(count) {
    for (uint32_t i = 0; i < count; ++i) {
      sges[i].length = bytes;
      wrs[i].wr_id = MakeWrId(WrKind::kWrite, /*engine_slot=*/3, 0);
      wrs[i].sg_list = &sges[i];
      wrs[i].num_sge = 1;
      wrs[i].next = i + 1 < count ? &wrs[i + 1] : nullptr;
    }
  }
  std::vector<ibv_send_wr> wrs;
  std::vector<ibv_sge> sges;
};

TEST(SendQueueLedgerTest, StampsConsecutiveSequencesKeepingKindAndSlot) {
  SendQueueLedger ledger;
  ledger.Reset(16, 4);
  Chain first(3, 10);
  ledger.Stamp(first.wrs.data(), 3);
  ledger.Posted(3);
  Chain second(2, 10);
  ledger.Stamp(second.wrs.data(), 2);
  ledger.Posted(2);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(WrIdValue(first.wrs[i].wr_id), i);
    EXPECT_EQ(WrIdKind(first.wrs[i].wr_id),
              static_cast<uint8_t>(WrKind::kWrite));
    EXPECT_EQ(WrIdEngineSlot(first.wrs[i].wr_id), 3u);
  }
  EXPECT_EQ(WrIdValue(second.wrs[0].wr_id), 3u);
  EXPECT_EQ(WrIdValue(second.wrs[1].wr_id), 4u);
  EXPECT_EQ(ledger.posted(), 5u);
}

TEST(SendQueueLedgerTest, SignalsEveryIntervalAcrossChains) {
  SendQueueLedger ledger;
  ledger.Reset(64, 4);  // at most 3 unsignalled in a row
  Chain chain(10, 1);
  chain.wrs[1].send_flags = IBV_SEND_SIGNALED;  // the caller's own
  ledger.Stamp(chain.wrs.data(), 10);
  std::vector<int> signalled;
  for (int i = 0; i < 10; ++i) {
    if (chain.wrs[i].send_flags & IBV_SEND_SIGNALED) signalled.push_back(i);
  }
  // 1 by the caller, then every fourth after it.
  EXPECT_EQ(signalled, (std::vector<int>{1, 5, 9}));
  EXPECT_EQ(ledger.signaled_end(), 10u);
  // The count carries over into the next chain: 3 more unsignalled, then
  // one.
  ledger.Posted(10);
  Chain next(4, 1);
  ledger.Stamp(next.wrs.data(), 4);
  EXPECT_FALSE(next.wrs[0].send_flags & IBV_SEND_SIGNALED);
  EXPECT_FALSE(next.wrs[1].send_flags & IBV_SEND_SIGNALED);
  EXPECT_FALSE(next.wrs[2].send_flags & IBV_SEND_SIGNALED);
  EXPECT_TRUE(next.wrs[3].send_flags & IBV_SEND_SIGNALED);
  EXPECT_EQ(ledger.signaled_end(), 14u);
}

TEST(SendQueueLedgerTest, IntervalOneSignalsEverything) {
  SendQueueLedger ledger;
  ledger.Reset(8, 0);  // clamped to 1
  EXPECT_EQ(ledger.signal_interval(), 1u);
  Chain chain(3, 1);
  ledger.Stamp(chain.wrs.data(), 3);
  for (const ibv_send_wr& wr : chain.wrs) {
    EXPECT_TRUE(wr.send_flags & IBV_SEND_SIGNALED);
  }
}

TEST(SendQueueLedgerTest, RoomIsDepthLessWhatIsOutstanding) {
  SendQueueLedger ledger;
  ledger.Reset(8, 2);
  EXPECT_TRUE(ledger.HasRoom(8));
  EXPECT_FALSE(ledger.HasRoom(9));
  Chain chain(6, 100);
  ledger.Stamp(chain.wrs.data(), 6);
  ledger.Posted(6);
  EXPECT_TRUE(ledger.HasRoom(2));
  EXPECT_FALSE(ledger.HasRoom(3));
  EXPECT_FALSE(ledger.Idle());
  // RC completes in order: a completion of sequence 3 frees 0..3.
  ledger.Completed(3);
  EXPECT_EQ(ledger.completed(), 4u);
  EXPECT_TRUE(ledger.HasRoom(6));
  // An older completion seen later (another CQ poll) frees nothing more.
  ledger.Completed(1);
  EXPECT_EQ(ledger.completed(), 4u);
  ledger.CompleteAll();
  EXPECT_TRUE(ledger.Idle());
  EXPECT_TRUE(ledger.HasRoom(8));
}

TEST(SendQueueLedgerTest, BytesOutstandingFollowCompletionsAndWrap) {
  SendQueueLedger ledger;
  ledger.Reset(4, 1);
  EXPECT_EQ(ledger.BytesOutstanding(), 0u);
  // 12 work requests through a queue of 4: sizes 1, 2, ..., 12.
  uint64_t posted_bytes = 0;
  uint64_t completed_bytes = 0;
  for (uint32_t i = 0; i < 12; ++i) {
    Chain one(1, i + 1);
    ledger.Stamp(one.wrs.data(), 1);
    ledger.Posted(1);
    posted_bytes += i + 1;
    EXPECT_EQ(ledger.BytesOutstanding(), posted_bytes - completed_bytes);
    if (i >= 2) {  // keep three outstanding
      ledger.Completed(i - 2);
      completed_bytes += i - 1;
      EXPECT_EQ(ledger.BytesOutstanding(), posted_bytes - completed_bytes);
    }
  }
  ledger.Completed(11);
  EXPECT_EQ(ledger.BytesOutstanding(), 0u);
}

// Stamp() counts one SGE without a loop and any other number with one:
// both, and none (a zero-byte message), count their bytes.
TEST(SendQueueLedgerTest, BytesOfNoneOneAndSeveralSges) {
  SendQueueLedger ledger;
  ledger.Reset(8, 1);
  ibv_sge sges[3] = {};
  sges[0].length = 100;
  sges[1].length = 20;
  sges[2].length = 3;
  ibv_send_wr wrs[3] = {};
  wrs[0].sg_list = sges;  // three SGEs: 123 bytes
  wrs[0].num_sge = 3;
  wrs[0].next = &wrs[1];
  wrs[1].sg_list = nullptr;  // none: 0 bytes
  wrs[1].num_sge = 0;
  wrs[1].next = &wrs[2];
  wrs[2].sg_list = &sges[1];  // one: 20 bytes
  wrs[2].num_sge = 1;
  ledger.Stamp(wrs, 3);
  ledger.Posted(3);
  EXPECT_EQ(ledger.BytesOutstanding(), 143u);
  ledger.Completed(0);
  EXPECT_EQ(ledger.BytesOutstanding(), 20u);
  ledger.Completed(1);
  EXPECT_EQ(ledger.BytesOutstanding(), 20u);
  ledger.Completed(2);
  EXPECT_EQ(ledger.BytesOutstanding(), 0u);
}

TEST(SendQueueLedgerTest, ChainsThatWrapMidChain) {
  // Chains of 3 through a queue of 4 wrap mid-chain at every position; the
  // ledger keeps its ring position without a division.
  SendQueueLedger ledger;
  ledger.Reset(4, 1);
  for (uint32_t round = 0; round < 8; ++round) {
    Chain chain(3, round + 1);
    ledger.Stamp(chain.wrs.data(), 3);
    EXPECT_EQ(WrIdValue(chain.wrs[0].wr_id), ledger.posted());
    ledger.Posted(3);
    EXPECT_EQ(ledger.BytesOutstanding(), 3u * (round + 1)) << "round " << round;
    ledger.Completed(ledger.posted() - 2);  // all but the last
    EXPECT_EQ(ledger.BytesOutstanding(), round + 1u) << "round " << round;
    ledger.Completed(ledger.posted() - 1);
    EXPECT_EQ(ledger.BytesOutstanding(), 0u) << "round " << round;
  }
  EXPECT_EQ(ledger.posted(), 24u);
}

TEST(SendQueueLedgerTest, ResetForgetsEverything) {
  SendQueueLedger ledger;
  ledger.Reset(4, 2);
  Chain chain(3, 7);
  ledger.Stamp(chain.wrs.data(), 3);
  ledger.Posted(3);
  ledger.Reset(6, 3);
  EXPECT_EQ(ledger.depth(), 6u);
  EXPECT_EQ(ledger.posted(), 0u);
  EXPECT_EQ(ledger.signaled_end(), 0u);
  EXPECT_EQ(ledger.BytesOutstanding(), 0u);
  EXPECT_TRUE(ledger.HasRoom(6));
}

}  // namespace
}  // namespace rdma_transport
