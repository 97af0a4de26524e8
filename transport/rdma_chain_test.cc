// RdmaChain: pieces laid out and linked, signalled every signal_bytes and
// where asked, inline only for WRITEs that fit, wr_ids naming the engine
// slot and the op kind.
#include "transport/rdma_chain.h"

#include <vector>

#include "gtest/gtest.h"
#include "transport/wr_id.h"

namespace rdma_transport {
namespace {

std::vector<bool> Signalled(const RdmaChain& chain) {
  std::vector<bool> signalled;
  for (uint32_t i = 0; i < chain.size(); ++i) {
    signalled.push_back(chain.at(i).send_flags & IBV_SEND_SIGNALED);
  }
  return signalled;
}

TEST(RdmaChainTest, LaysOutLinkedPiecesWithTheirAddressesAndKeys) {
  RdmaChain chain;
  chain.Reset(4, /*engine_slot=*/7, /*usable_inline=*/0);
  chain.Begin(1 << 20);
  chain.Append(0x1000, 11, 0x9000, 22, 300, /*is_write=*/true);
  chain.Append(0x2000, 12, 0xa000, 23, 0, /*is_write=*/false);
  ASSERT_EQ(chain.size(), 2u);
  EXPECT_EQ(chain.bytes(), 300u);
  const ibv_send_wr& write = chain.at(0);
  const ibv_send_wr& read = chain.at(1);
  EXPECT_EQ(write.next, &read);
  EXPECT_EQ(read.next, nullptr);
  EXPECT_EQ(chain.head(), &write);
  EXPECT_EQ(write.opcode, IBV_WR_RDMA_WRITE);
  EXPECT_EQ(read.opcode, IBV_WR_RDMA_READ);
  EXPECT_EQ(WrIdKind(write.wr_id), static_cast<uint8_t>(WrKind::kWrite));
  EXPECT_EQ(WrIdKind(read.wr_id), static_cast<uint8_t>(WrKind::kRead));
  EXPECT_EQ(WrIdEngineSlot(write.wr_id), 7u);
  EXPECT_EQ(write.sg_list->addr, 0x1000u);
  EXPECT_EQ(write.sg_list->lkey, 11u);
  EXPECT_EQ(write.sg_list->length, 300u);
  EXPECT_EQ(write.num_sge, 1);
  EXPECT_EQ(read.num_sge, 0);  // a zero-length piece gathers nothing
  EXPECT_EQ(write.wr.rdma.remote_addr, 0x9000u);
  EXPECT_EQ(write.wr.rdma.rkey, 22u);
  EXPECT_EQ(read.wr.rdma.rkey, 23u);
}

TEST(RdmaChainTest, SignalsEverySignalBytesAndWhereAsked) {
  RdmaChain chain;
  chain.Reset(8, 0, 0);
  chain.Begin(1000);
  for (int i = 0; i < 3; ++i) chain.Append(0, 0, 0, 0, 400, true);
  // 400, 800, 1200 -> the third crosses 1000.
  EXPECT_EQ(Signalled(chain), (std::vector<bool>{false, false, true}));
  chain.Append(0, 0, 0, 0, 100, true);
  chain.SignalLast();  // an op's end; the count starts again
  chain.Append(0, 0, 0, 0, 900, true);
  chain.Append(0, 0, 0, 0, 100, true);
  EXPECT_EQ(Signalled(chain),
            (std::vector<bool>{false, false, true, true, false, true}));
  EXPECT_FALSE(chain.full());
}

TEST(RdmaChainTest, BeginEmptiesAndFullStopsAtTheRoomReserved) {
  RdmaChain chain;
  chain.Reset(2, 0, 0);
  chain.Begin(1);
  EXPECT_TRUE(chain.empty());
  chain.SignalLast();  // nothing to signal
  chain.Append(0, 0, 0, 0, 8, true);
  chain.Append(0, 0, 0, 0, 8, true);
  EXPECT_TRUE(chain.full());
  chain.Begin(1);
  EXPECT_TRUE(chain.empty());
  EXPECT_EQ(chain.bytes(), 0u);
  // A re-laid chain does not keep the old links or flags.
  chain.Append(0, 0, 0, 0, 8, true);
  EXPECT_EQ(chain.at(0).next, nullptr);
}

TEST(RdmaChainTest, InlineOnlyForWritesThatFit) {
  RdmaChain chain;
  chain.Reset(4, 0, /*usable_inline=*/64);
  chain.Begin(1 << 20);
  chain.Append(0, 0, 0, 0, 64, /*is_write=*/true);
  chain.Append(0, 0, 0, 0, 65, /*is_write=*/true);
  chain.Append(0, 0, 0, 0, 8, /*is_write=*/false);
  EXPECT_TRUE(chain.at(0).send_flags & IBV_SEND_INLINE);
  EXPECT_FALSE(chain.at(1).send_flags & IBV_SEND_INLINE);
  EXPECT_FALSE(chain.at(2).send_flags & IBV_SEND_INLINE);
  // No inline on a QP without it.
  chain.Reset(4, 0, 0);
  chain.Begin(1 << 20);
  chain.Append(0, 0, 0, 0, 8, true);
  EXPECT_FALSE(chain.at(0).send_flags & IBV_SEND_INLINE);
}

}  // namespace
}  // namespace rdma_transport
