// Data movement between two connected QPs: every opcode, scatter/gather,
// immediates, signalling, ordering.

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/pair_fixture.h"

namespace rdma_transport::sim {
namespace {

void Fill(Endpoint& endpoint, size_t offset, size_t length, uint8_t seed) {
  for (size_t i = 0; i < length; ++i) {
    endpoint.data()[offset + i] = static_cast<uint8_t>(seed + i * 7);
  }
}

std::vector<uint8_t> Bytes(Endpoint& endpoint, size_t offset, size_t length) {
  return {endpoint.data() + offset, endpoint.data() + offset + length};
}

using DataPathTest = PairTest;

TEST_F(DataPathTest, SendLandsInTheReceiveBuffer) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  Fill(*a_, 0, 100, 3);
  ASSERT_OK(b_->PostRecv(/*wr_id=*/11, /*offset=*/4096, /*length=*/256));
  ASSERT_OK(a_->PostSend(/*wr_id=*/22, IBV_WR_SEND, /*offset=*/0, 100));

  const ibv_wc recv = PollOneRecv(*b_);
  EXPECT_EQ(recv.status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv.wr_id, 11u);
  EXPECT_EQ(recv.opcode, IBV_WC_RECV);
  EXPECT_EQ(recv.byte_len, 100u);
  EXPECT_EQ(recv.wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(recv.qp_num, b_->qp_num());
  EXPECT_EQ(recv.src_qp, a_->qp_num());
  EXPECT_EQ(Bytes(*b_, 4096, 100), Bytes(*a_, 0, 100));

  const ibv_wc send = PollOneSend(*a_);
  EXPECT_EQ(send.status, IBV_WC_SUCCESS);
  EXPECT_EQ(send.wr_id, 22u);
  EXPECT_EQ(send.opcode, IBV_WC_SEND);
  EXPECT_EQ(send.byte_len, 100u);
  EXPECT_EQ(send.qp_num, a_->qp_num());
}

TEST_F(DataPathTest, SendWithImmediateCarriesItInNetworkOrder) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND_WITH_IMM, 0, 16, IBV_SEND_SIGNALED,
                         htonl(0xC0FFEE)));
  const ibv_wc recv = PollOneRecv(*b_);
  EXPECT_EQ(recv.status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv.opcode, IBV_WC_RECV);
  EXPECT_EQ(recv.byte_len, 16u);
  EXPECT_NE(recv.wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(ntohl(recv.imm_data), 0xC0FFEEu);
  EXPECT_EQ(PollOneSend(*a_).opcode, IBV_WC_SEND);
}

TEST_F(DataPathTest, RdmaWriteConsumesNoReceive) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  Fill(*a_, 0, 3000, 9);
  ASSERT_OK(a_->PostSend(5, IBV_WR_RDMA_WRITE, 0, 3000, IBV_SEND_SIGNALED, 0,
                         b_->address(1000), b_->rkey()));
  const ibv_wc send = PollOneSend(*a_);
  EXPECT_EQ(send.status, IBV_WC_SUCCESS);
  EXPECT_EQ(send.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(send.wr_id, 5u);
  EXPECT_EQ(Bytes(*b_, 1000, 3000), Bytes(*a_, 0, 3000));
  EXPECT_TRUE(b_->PollRecvCq()->empty());
}

TEST_F(DataPathTest, RdmaWriteWithImmediateCompletesAReceive) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  Fill(*a_, 0, 512, 1);
  ASSERT_OK(b_->PostRecv(77, 0, 0));
  ASSERT_OK(a_->PostSend(8, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 512,
                         IBV_SEND_SIGNALED, htonl(42), b_->address(8192),
                         b_->rkey()));
  const ibv_wc recv = PollOneRecv(*b_);
  EXPECT_EQ(recv.status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv.wr_id, 77u);
  EXPECT_EQ(recv.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  // As mlx5: byte_len is the length of the write.
  EXPECT_EQ(recv.byte_len, 512u);
  EXPECT_NE(recv.wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(ntohl(recv.imm_data), 42u);
  EXPECT_EQ(Bytes(*b_, 8192, 512), Bytes(*a_, 0, 512));
  EXPECT_EQ(PollOneSend(*a_).opcode, IBV_WC_RDMA_WRITE);
}

TEST_F(DataPathTest, RdmaReadFetchesRemoteMemory) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  Fill(*b_, 2048, 5000, 200);
  ASSERT_OK(a_->PostSend(9, IBV_WR_RDMA_READ, 10000, 5000, IBV_SEND_SIGNALED, 0,
                         b_->address(2048), b_->rkey()));
  const ibv_wc send = PollOneSend(*a_);
  EXPECT_EQ(send.status, IBV_WC_SUCCESS);
  EXPECT_EQ(send.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(send.byte_len, 5000u);
  EXPECT_EQ(Bytes(*a_, 10000, 5000), Bytes(*b_, 2048, 5000));
  EXPECT_TRUE(b_->PollRecvCq()->empty());
}

TEST_F(DataPathTest, ScatterGatherOnBothSides) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  Fill(*a_, 0, 4096, 5);
  // Gather 10 bytes at 0, 20 at 100, 30 at 200.
  ibv_sge gather[3] = {{a_->address(0), 10, a_->lkey()},
                       {a_->address(100), 20, a_->lkey()},
                       {a_->address(200), 30, a_->lkey()}};
  // Scatter into 25 at 1000, 5 at 2000, 100 at 3000.
  ibv_sge scatter[3] = {{b_->address(1000), 25, b_->lkey()},
                        {b_->address(2000), 5, b_->lkey()},
                        {b_->address(3000), 100, b_->lkey()}};
  ibv_recv_wr recv{};
  recv.wr_id = 1;
  recv.sg_list = scatter;
  recv.num_sge = 3;
  ibv_recv_wr* bad_recv = nullptr;
  ASSERT_OK(verbs_->PostRecv(b_->qp(), &recv, &bad_recv));
  ibv_send_wr send{};
  send.wr_id = 2;
  send.sg_list = gather;
  send.num_sge = 3;
  send.opcode = IBV_WR_SEND;
  send.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad_send = nullptr;
  ASSERT_OK(verbs_->PostSend(a_->qp(), &send, &bad_send));

  EXPECT_EQ(PollOneRecv(*b_).byte_len, 60u);
  std::vector<uint8_t> sent;
  for (const ibv_sge& sge : gather) {
    auto* p = reinterpret_cast<uint8_t*>(sge.addr);
    sent.insert(sent.end(), p, p + sge.length);
  }
  std::vector<uint8_t> received = Bytes(*b_, 1000, 25);
  for (uint8_t byte : Bytes(*b_, 2000, 5)) received.push_back(byte);
  for (uint8_t byte : Bytes(*b_, 3000, 30)) received.push_back(byte);
  EXPECT_EQ(received, sent);
  // Nothing beyond the 60 bytes was written.
  EXPECT_EQ(b_->data()[3030], 0);
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
}

TEST_F(DataPathTest, RdmaReadScattersOverLocalSges) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  Fill(*b_, 0, 64, 77);
  ibv_sge scatter[2] = {{a_->address(500), 24, a_->lkey()},
                        {a_->address(900), 40, a_->lkey()}};
  ibv_send_wr read{};
  read.wr_id = 3;
  read.sg_list = scatter;
  read.num_sge = 2;
  read.opcode = IBV_WR_RDMA_READ;
  read.send_flags = IBV_SEND_SIGNALED;
  read.wr.rdma.remote_addr = b_->address(0);
  read.wr.rdma.rkey = b_->rkey();
  ibv_send_wr* bad = nullptr;
  ASSERT_OK(verbs_->PostSend(a_->qp(), &read, &bad));
  EXPECT_EQ(PollOneSend(*a_).byte_len, 64u);
  EXPECT_EQ(Bytes(*a_, 500, 24), Bytes(*b_, 0, 24));
  EXPECT_EQ(Bytes(*a_, 900, 40), Bytes(*b_, 24, 40));
}

TEST_F(DataPathTest, UnsignalledWorkRequestsCompleteSilently) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(b_->PostRecv(2, 64, 64));
  ASSERT_OK(a_->PostSend(10, IBV_WR_SEND, 0, 8, /*flags=*/0));
  ASSERT_OK(a_->PostSend(11, IBV_WR_SEND, 0, 8, IBV_SEND_SIGNALED));
  const std::vector<ibv_wc> sent = *a_->PollSendCq();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].wr_id, 11u);
  // Both arrived.
  EXPECT_EQ(b_->PollRecvCq()->size(), 2u);
}

TEST_F(DataPathTest, SqSigAllSignalsEveryWorkRequest) {
  EndpointOptions options;
  options.sq_sig_all = 1;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), options));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(10, IBV_WR_SEND, 0, 8, /*flags=*/0));
  ASSERT_OK(a_->PostSend(11, IBV_WR_RDMA_WRITE, 0, 8, /*flags=*/0, 0,
                         b_->address(0), b_->rkey()));
  const std::vector<ibv_wc> sent = *a_->PollSendCq();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].wr_id, 10u);
  EXPECT_EQ(sent[1].wr_id, 11u);
}

TEST_F(DataPathTest, ZeroLengthSendAndWrite) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 0));
  const ibv_wc recv = PollOneRecv(*b_);
  EXPECT_EQ(recv.status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv.byte_len, 0u);
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);

  // A zero-length write checks no rkey at all.
  ASSERT_OK(a_->PostSend(3, IBV_WR_RDMA_WRITE, 0, 0, IBV_SEND_SIGNALED, 0, 0,
                         /*rkey=*/0xdead));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
}

TEST_F(DataPathTest, ReceivesCompleteInPostingOrder) {
  EndpointOptions options;
  options.cap.max_send_wr = 64;
  options.cap.max_recv_wr = 64;
  options.cqe = 128;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), options));
  for (uint64_t i = 0; i < 50; ++i) {
    ASSERT_OK(b_->PostRecv(1000 + i, i * 8, 8));
  }
  for (uint64_t i = 0; i < 50; ++i) {
    a_->data()[i] = static_cast<uint8_t>(i);
    ASSERT_OK(a_->PostSend(i, IBV_WR_SEND, i, 1));
  }
  const std::vector<ibv_wc> received = *b_->PollRecvCq(128);
  ASSERT_EQ(received.size(), 50u);
  for (uint64_t i = 0; i < 50; ++i) {
    EXPECT_EQ(received[i].wr_id, 1000 + i);
    EXPECT_EQ(b_->data()[i * 8], static_cast<uint8_t>(i));
  }
  const std::vector<ibv_wc> sent = *a_->PollSendCq(128);
  ASSERT_EQ(sent.size(), 50u);
  for (uint64_t i = 0; i < 50; ++i) EXPECT_EQ(sent[i].wr_id, i);
}

TEST_F(DataPathTest, ChainedWorkRequestsArePostedTogether) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ibv_sge sges[3];
  ibv_recv_wr recvs[3] = {};
  for (int i = 0; i < 3; ++i) {
    sges[i] = {b_->address(i * 100), 100, b_->lkey()};
    recvs[i].wr_id = i;
    recvs[i].sg_list = &sges[i];
    recvs[i].num_sge = 1;
    recvs[i].next = i < 2 ? &recvs[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  ASSERT_OK(verbs_->PostRecv(b_->qp(), recvs, &bad));
  ibv_sge sge{a_->address(0), 10, a_->lkey()};
  ibv_send_wr sends[3] = {};
  for (int i = 0; i < 3; ++i) {
    sends[i].wr_id = 10 + i;
    sends[i].sg_list = &sge;
    sends[i].num_sge = 1;
    sends[i].opcode = IBV_WR_SEND;
    sends[i].send_flags = IBV_SEND_SIGNALED;
    sends[i].next = i < 2 ? &sends[i + 1] : nullptr;
  }
  ibv_send_wr* bad_send = nullptr;
  ASSERT_OK(verbs_->PostSend(a_->qp(), sends, &bad_send));
  EXPECT_EQ(a_->PollSendCq()->size(), 3u);
  EXPECT_EQ(b_->PollRecvCq()->size(), 3u);
}

TEST_F(DataPathTest, InlineSendNeedsNoMemoryRegion) {
  EndpointOptions options;
  options.cap.max_inline_data = 64;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), options));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  char message[] = "inline payload, not registered";
  ibv_sge sge{reinterpret_cast<uintptr_t>(message), sizeof(message), 0};
  ibv_send_wr wr{};
  wr.wr_id = 5;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_send_wr* bad = nullptr;
  ASSERT_OK(verbs_->PostSend(a_->qp(), &wr, &bad));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
  EXPECT_EQ(PollOneRecv(*b_).byte_len, sizeof(message));
  EXPECT_STREQ(reinterpret_cast<char*>(b_->data()), message);
}

TEST_F(DataPathTest, LoopbackOnOneDevice) {
  Fabric fabric;
  SimVerbs verbs(&fabric);
  const std::string device = *fabric.AddDevice(ConnectX7());
  auto first = *Endpoint::Create(&verbs, device);
  auto second = *Endpoint::Create(&verbs, device);
  ASSERT_OK(first->ConnectTo(*second));
  ASSERT_OK(second->ConnectTo(*first));
  ASSERT_OK(second->PostRecv(1, 0, 32));
  std::memcpy(first->data(), "loop", 4);
  ASSERT_OK(first->PostSend(2, IBV_WR_SEND, 0, 4));
  EXPECT_EQ(PollOneRecv(*second).byte_len, 4u);
  EXPECT_EQ(std::memcmp(second->data(), "loop", 4), 0);
  EXPECT_EQ(PollOneSend(*first).status, IBV_WC_SUCCESS);
}

TEST_F(DataPathTest, InfinibandRoutesByLid) {
  ASSERT_NO_FATAL_FAILURE(
      Connect(ConnectX7Infiniband(), ConnectX7Infiniband()));
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_OK(verbs_->QueryQp(a_->qp(), &attr, IBV_QP_AV, &init));
  EXPECT_EQ(attr.ah_attr.dlid, 2);  // b_'s device is the second: LID 2.
  EXPECT_EQ(attr.ah_attr.is_global, 0);
  ASSERT_OK(b_->PostRecv(1, 0, 32));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 32));
  const ibv_wc recv = PollOneRecv(*b_);
  EXPECT_EQ(recv.status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv.slid, 1);
}

TEST_F(DataPathTest, MixedProfilesInteroperate) {
  ASSERT_NO_FATAL_FAILURE(Connect(IntelE810(), SoftRoce()));
  Fill(*a_, 0, 1000, 4);
  ASSERT_OK(b_->PostRecv(1, 0, 1000));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 1000));
  EXPECT_EQ(PollOneRecv(*b_).byte_len, 1000u);
  EXPECT_EQ(Bytes(*b_, 0, 1000), Bytes(*a_, 0, 1000));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
}

TEST_F(DataPathTest, ImmediateModeAdvancesTheVirtualClockOnly) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  const auto before = fabric_->Now();
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 0));
  // One request and one ACK across 1 us links, plus their headers'
  // serialisation at 200 Gb/s (82 and 86 bytes: 4 ns each, rounded up).
  EXPECT_EQ(fabric_->Now() - before,
            std::chrono::microseconds(2) + std::chrono::nanoseconds(8));
  EXPECT_EQ(fabric_->PendingEvents(), 0u);
}

}  // namespace
}  // namespace rdma_transport::sim
