// Threads: posting from one thread while another polls (run it under
// --config=tsan), and a blocking GetCqEvent woken by another thread's post.

#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "sim/pair_fixture.h"

namespace rdma_transport::sim {
namespace {

constexpr int kMessages = 20000;

using ThreadsTest = PairTest;

TEST_F(ThreadsTest, PostInOneThreadPollInAnother) {
  EndpointOptions options;
  options.cap.max_send_wr = 64;
  options.cap.max_recv_wr = 64;
  options.cap.max_inline_data = sizeof(int);
  options.cqe = 256;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), options));
  for (int i = 0; i < 32; ++i) ASSERT_OK(b_->PostRecv(i, i * 8, 8));

  std::atomic<bool> stop{false};
  std::thread poster([&] {
    for (int i = 0; i < kMessages && !stop; ++i) {
      // Each message carries its sequence number, inline: copied at post,
      // so this thread's stack variable is free again when PostSend returns.
      int sequence = i;
      ibv_sge sge{reinterpret_cast<uintptr_t>(&sequence), sizeof(sequence), 0};
      ibv_send_wr wr{};
      wr.wr_id = static_cast<uint64_t>(i);
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_SEND;
      wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
      while (!stop) {
        ibv_send_wr* bad = nullptr;
        absl::Status status = verbs_->PostSend(a_->qp(), &wr, &bad);
        if (status.ok()) break;
        if (VerbsErrno(status) != ENOMEM) {  // Full: the poller frees slots.
          ADD_FAILURE() << status;
          stop = true;
        }
        std::this_thread::yield();
      }
    }
  });

  // This thread consumes both CQs and reposts the receives.
  int sent = 0;
  int received = 0;
  ibv_wc wc[16];
  while ((sent < kMessages || received < kMessages) && !stop) {
    absl::StatusOr<int> sends = verbs_->PollCq(a_->send_cq(), 16, wc);
    EXPECT_OK(sends);
    for (int i = 0; i < sends.value_or(0); ++i) {
      EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
      EXPECT_EQ(wc[i].wr_id, static_cast<uint64_t>(sent));
      ++sent;
    }
    absl::StatusOr<int> receives = verbs_->PollCq(b_->recv_cq(), 16, wc);
    EXPECT_OK(receives);
    for (int i = 0; i < receives.value_or(0); ++i) {
      EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
      int sequence = -1;
      std::memcpy(&sequence, b_->data() + wc[i].wr_id * 8, sizeof(sequence));
      EXPECT_EQ(sequence, received) << "out of order or corrupted";
      ++received;
      EXPECT_OK(b_->PostRecv(wc[i].wr_id, wc[i].wr_id * 8, 8));
    }
    if (!sends.ok() || !receives.ok() || HasFailure()) stop = true;
    if (sends.value_or(0) + receives.value_or(0) == 0) {
      std::this_thread::yield();
    }
  }
  stop = true;
  poster.join();
  EXPECT_EQ(sent, kMessages);
  EXPECT_EQ(received, kMessages);
  EXPECT_EQ(fabric_->Counters().completions(IBV_WC_SUCCESS), 2u * kMessages);
}

TEST_F(ThreadsTest, BlockingGetCqEventIsWokenByAnotherThread) {
  EndpointOptions options;
  options.with_completion_channel = true;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), options));
  ASSERT_OK(verbs_->ReqNotifyCq(b_->recv_cq(), false));
  ASSERT_OK(b_->PostRecv(1, 0, 64));

  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  std::thread waiter([&] {
    // Blocks in read(2) on the channel's eventfd.
    EXPECT_OK(verbs_->GetCqEvent(b_->channel(), &cq, &cq_context));
  });
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));
  waiter.join();
  EXPECT_EQ(cq, b_->recv_cq());
  verbs_->AckCqEvents(cq, 1);
}

}  // namespace
}  // namespace rdma_transport::sim
