// ReceiveReposts (transport/receive_reposts.h): the slots held go out as one
// chain, in order, with their addresses and wr_ids; a refusal is returned
// and the slots are forgotten. The transport's use of it (one PostRecv per
// credit batch) is checked end to end in tests/e2e_test.cc.
#include "transport/receive_reposts.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "transport/wr_id.h"
#include "verbs_shim/mock_verbs.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

using ::testing::_;
using ::testing::Return;

struct Posted {
  uint64_t wr_id;
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

TEST(ReceiveRepostsTest, PostsTheSlotsHeldAsOneChainInOrder) {
  MockVerbs verbs;
  ibv_qp qp{};
  std::vector<Posted> posted;
  EXPECT_CALL(verbs, PostRecv(&qp, _, _))
      .WillOnce([&](ibv_qp*, ibv_recv_wr* wr, ibv_recv_wr**) {
        for (; wr != nullptr; wr = wr->next) {
          EXPECT_EQ(wr->num_sge, 1);
          posted.push_back({wr->wr_id, wr->sg_list[0].addr,
                            wr->sg_list[0].length, wr->sg_list[0].lkey});
        }
        return absl::OkStatus();
      });
  ReceiveReposts reposts;
  EXPECT_TRUE(reposts.empty());
  for (uint32_t slot : {5u, 2u, 9u}) reposts.Add(slot);
  EXPECT_EQ(reposts.count(), 3u);
  ASSERT_TRUE(reposts.Post(verbs, &qp, 0x10000, 256, 77, 3).ok());
  EXPECT_TRUE(reposts.empty());
  ASSERT_EQ(posted.size(), 3u);
  const uint32_t slots[] = {5, 2, 9};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(posted[i].wr_id, MakeWrId(WrKind::kRecv, 3, slots[i]));
    EXPECT_EQ(posted[i].addr, 0x10000u + slots[i] * 256u);
    EXPECT_EQ(posted[i].length, 256u);
    EXPECT_EQ(posted[i].lkey, 77u);
  }
  // Nothing held: nothing posted (the mock would fail a second call).
  EXPECT_TRUE(reposts.Post(verbs, &qp, 0x10000, 256, 77, 3).ok());
}

TEST(ReceiveRepostsTest, HoldsUpToItsCapacity) {
  ReceiveReposts reposts;
  for (uint32_t i = 0; i < ReceiveReposts::kCapacity; ++i) {
    ASSERT_FALSE(reposts.full());
    reposts.Add(i);
  }
  EXPECT_TRUE(reposts.full());
}

TEST(ReceiveRepostsTest, SaysWhetherASlotWasAddedSinceItWasLastAsked) {
  MockVerbs verbs;
  ibv_qp qp{};
  EXPECT_CALL(verbs, PostRecv(&qp, _, _)).WillOnce(Return(absl::OkStatus()));
  ReceiveReposts reposts;
  EXPECT_FALSE(reposts.TakeAddedSinceAsked());
  reposts.Add(4);
  EXPECT_TRUE(reposts.TakeAddedSinceAsked());
  EXPECT_FALSE(reposts.TakeAddedSinceAsked());  // asked: cleared
  reposts.Add(6);
  ASSERT_TRUE(reposts.Post(verbs, &qp, 0, 64, 1, 0).ok());
  EXPECT_FALSE(reposts.TakeAddedSinceAsked());  // posted: cleared
}

TEST(ReceiveRepostsTest, ARefusalIsReturnedAndTheSlotsForgotten) {
  MockVerbs verbs;
  ibv_qp qp{};
  EXPECT_CALL(verbs, PostRecv(&qp, _, _))
      .WillOnce(Return(VerbsError("ibv_post_recv", ENOMEM, "queue full")));
  ReceiveReposts reposts;
  reposts.Add(1);
  const absl::Status status = reposts.Post(verbs, &qp, 0, 64, 1, 0);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("ibv_post_recv"), std::string::npos)
      << status;
  EXPECT_TRUE(reposts.empty());
}

}  // namespace
}  // namespace rdma_transport
