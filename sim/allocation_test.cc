// The data path allocates nothing in steady state (verbs.h promises it for
// PostSend, PostRecv and PollCq): this binary counts every operator new.

#include <atomic>
#include <cstdlib>
#include <new>

#include "gtest/gtest.h"
#include "sim/pair_fixture.h"

namespace {
std::atomic<long> allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* memory = std::malloc(size == 0 ? 1 : size)) return memory;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete[](void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }
void operator delete[](void* memory, std::size_t) noexcept {
  std::free(memory);
}

namespace rdma_transport::sim {
namespace {

class AllocationTest : public PairTest {
 protected:
  // One round of every data-path call: a receive, an inline SEND, a gathered
  // SEND, an RDMA WRITE, an RDMA READ, and polling all of it.
  void Round() {
    ibv_sge recv_sge{b_->address(0), 256, b_->lkey()};
    ibv_recv_wr recv{};
    recv.sg_list = &recv_sge;
    recv.num_sge = 1;
    ibv_recv_wr* bad_recv = nullptr;
    ASSERT_OK(verbs_->PostRecv(b_->qp(), &recv, &bad_recv));
    ASSERT_OK(verbs_->PostRecv(b_->qp(), &recv, &bad_recv));

    ibv_sge sge{a_->address(0), 8, a_->lkey()};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    ibv_send_wr* bad = nullptr;
    ASSERT_OK(verbs_->PostSend(a_->qp(), &wr, &bad));
    sge.length = 200;
    wr.send_flags = IBV_SEND_SIGNALED;
    ASSERT_OK(verbs_->PostSend(a_->qp(), &wr, &bad));
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = b_->address(1024);
    wr.wr.rdma.rkey = b_->rkey();
    ASSERT_OK(verbs_->PostSend(a_->qp(), &wr, &bad));
    wr.opcode = IBV_WR_RDMA_READ;
    ASSERT_OK(verbs_->PostSend(a_->qp(), &wr, &bad));

    ibv_wc wc[8];
    absl::StatusOr<int> sent = verbs_->PollCq(a_->send_cq(), 8, wc);
    ASSERT_OK(sent);
    ASSERT_EQ(*sent, 4);
    absl::StatusOr<int> received = verbs_->PollCq(b_->recv_cq(), 8, wc);
    ASSERT_OK(received);
    ASSERT_EQ(*received, 2);
  }
};

TEST_F(AllocationTest, SteadyStateDataPathAllocatesNothing) {
  EndpointOptions options;
  options.cap.max_inline_data = 64;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), options));
  for (int i = 0; i < 100; ++i) ASSERT_NO_FATAL_FAILURE(Round());  // Warm up.

  const long before = allocations.load();
  for (int i = 0; i < 10000; ++i) ASSERT_NO_FATAL_FAILURE(Round());
  EXPECT_EQ(allocations.load() - before, 0);
}

TEST_F(AllocationTest, TheCounterSeesAllocations) {
  const long before = allocations.load();
  ASSERT_NO_FATAL_FAILURE(Connect());
  EXPECT_GT(allocations.load() - before, 10);
}

}  // namespace
}  // namespace rdma_transport::sim
