// The memory formulas of docs/resources.md (Connection::Footprint) against
// what connections really register and allocate on the simulator, with and
// without an engine's shared receive queue: registered bytes and memory
// regions counted by the simulator (exactly), heap counted by a replaced
// operator new (the Connection's own, after the simulated QP and MRs it
// makes are taken off). Not timed.
#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/benchmark_setup.h"
#include "tests/connection_pair.h"
#include "tests/counting_allocator.h"
#include "tests/engine_pair_fixture.h"
#include "transport/connection.h"
#include "transport/engine.h"

namespace rdma_transport {
namespace {

constexpr int kPairs = 16;
// How far the measured heap may be from the formula: the formula leaves out
// the connection's name (a heap string of both addresses) and the Context's
// entry for its async events, and the simulator's own tables (QP number
// table, handle maps) grow by doubling, so its share per QP differs a little
// between the connections and the raw baseline. One more array of 16
// entries per connection is already more than this.
constexpr int64_t kHeapTolerance = 128;

struct Measured {
  uint64_t registrations = 0;  // per connection
  uint64_t registered_bytes = 0;
  int64_t heap_bytes = 0;  // the transport's own, per connection
  ConnectionFootprint formula;
  uint64_t engine_registered_bytes = 0;
};

class EngineMemoryTest
    : public EnginePairFixture<::testing::TestWithParam<bool>> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(HeapCountingActive())
        << "operator new is not the counting one (tests/counting_allocator.h)";
    ASSERT_NO_FATAL_FAILURE(OpenContexts());
  }

  // The simulator's lookup tables grow by doubling and never shrink: made
  // large enough for the connections and the raw baseline at once, so that
  // neither pays for a doubling the other caused.
  void GrowTheFabricsTables() {
    ibv_cq* cq = nullptr;
    {
      absl::StatusOr<ibv_cq*> made =
          verbs_->CreateCq(contexts_[0]->device(), 16, nullptr, nullptr, 0);
      ASSERT_TRUE(made.ok()) << made.status();
      cq = *made;
    }
    std::vector<ibv_qp*> qps;
    for (int i = 0; i < 8 * kPairs; ++i) {
      ibv_qp_init_attr init = {};
      init.send_cq = cq;
      init.recv_cq = cq;
      init.qp_type = IBV_QPT_RC;
      init.cap.max_send_wr = 1;
      init.cap.max_recv_wr = 1;
      init.cap.max_send_sge = 1;
      init.cap.max_recv_sge = 1;
      absl::StatusOr<ibv_qp*> qp = verbs_->CreateQp(contexts_[0]->pd(), &init);
      ASSERT_TRUE(qp.ok()) << qp.status();
      qps.push_back(*qp);
    }
    for (ibv_qp* qp : qps) ASSERT_TRUE(verbs_->DestroyQp(qp).ok());
    ASSERT_TRUE(verbs_->DestroyCq(cq).ok());
    // And the table of MRs by key (the raw baseline registers on this side).
    std::vector<std::byte> memory(64);
    std::vector<ibv_mr*> mrs;
    for (int i = 0; i < 16 * kPairs; ++i) {
      absl::StatusOr<ibv_mr*> mr =
          verbs_->RegMr(contexts_[0]->pd(), memory.data(), memory.size(),
                        IBV_ACCESS_LOCAL_WRITE);
      ASSERT_TRUE(mr.ok()) << mr.status();
      mrs.push_back(*mr);
    }
    for (ibv_mr* mr : mrs) ASSERT_TRUE(verbs_->DeregMr(mr).ok());
  }

  void Measure(bool shared_receive_queue, Measured& out) {
    const EngineOptions engine_options =
        ManyConnectionEngine(kPairs, shared_receive_queue);
    const sim::SimCounters before_engines = fabric_->Counters();
    ASSERT_NO_FATAL_FAILURE(OpenEngines(engine_options));
    out.engine_registered_bytes = (fabric_->Counters().bytes_registered -
                                   before_engines.bytes_registered) /
                                  2;

    ASSERT_NO_FATAL_FAILURE(GrowTheFabricsTables());
    const sim::SimCounters before = fabric_->Counters();
    const HeapCounts heap_before = CountHeap();
    // Each dial's listener is gone again when ConnectPairs() returns.
    ASSERT_NO_FATAL_FAILURE(ConnectPairs(kPairs, ManyConnectionShape()));
    const int64_t connection_heap =
        CountHeap().live_bytes - heap_before.live_bytes;
    const sim::SimCounters after = fabric_->Counters();
    constexpr int kConnections = 2 * kPairs;
    out.registrations =
        (after.memory_registrations - before.memory_registrations) /
        kConnections;
    out.registered_bytes =
        (after.bytes_registered - before.bytes_registered) / kConnections;
    EXPECT_EQ((after.memory_registrations - before.memory_registrations) %
                  kConnections,
              0u);
    EXPECT_EQ(after.qps_created - before.qps_created,
              static_cast<uint64_t>(kConnections));

    // What the simulator itself keeps for the same QPs and MRs, made raw.
    ibv_qp_attr attr = {};
    ibv_qp_init_attr init = {};
    ASSERT_TRUE(
        verbs_->QueryQp(clients_[0]->qp(), &attr, IBV_QP_CAP, &init).ok());
    const HeapCounts raw_before = CountHeap();
    std::vector<ibv_qp*> qps;
    std::vector<ibv_mr*> mrs;
    std::vector<std::byte> memory(4096);
    ibv_cq* cq = clients_[0]->qp()->send_cq;
    for (int i = 0; i < kConnections; ++i) {
      ibv_qp_init_attr raw = init;
      raw.send_cq = cq;
      raw.recv_cq = cq;
      absl::StatusOr<ibv_qp*> qp = verbs_->CreateQp(contexts_[0]->pd(), &raw);
      ASSERT_TRUE(qp.ok()) << qp.status();
      qps.push_back(*qp);
      for (uint64_t r = 0; r < out.registrations; ++r) {
        absl::StatusOr<ibv_mr*> mr =
            verbs_->RegMr(contexts_[0]->pd(), memory.data(), memory.size(),
                          IBV_ACCESS_LOCAL_WRITE);
        ASSERT_TRUE(mr.ok()) << mr.status();
        mrs.push_back(*mr);
      }
    }
    const int64_t raw_heap = CountHeap().live_bytes - raw_before.live_bytes;
    for (ibv_mr* mr : mrs) ASSERT_TRUE(verbs_->DeregMr(mr).ok());
    for (ibv_qp* qp : qps) ASSERT_TRUE(verbs_->DestroyQp(qp).ok());
    out.heap_bytes = (connection_heap - raw_heap) / kConnections;
    out.formula = Connection::Footprint(ManyConnectionShape(), &engine_options);
  }
};

TEST_P(EngineMemoryTest, TheFormulasMatchWhatConnectionsRegisterAndAllocate) {
  const bool srq = GetParam();
  Measured m;
  ASSERT_NO_FATAL_FAILURE(Measure(srq, m));
  EXPECT_EQ(m.registrations, m.formula.registrations);
  EXPECT_EQ(m.registered_bytes, m.formula.registered_bytes);
  const ConnectionOptions shape = ManyConnectionShape();
  if (srq) {
    // The pool is the engine's: registered once, a share per connection.
    EXPECT_EQ(m.engine_registered_bytes,
              uint64_t{kPairs} * m.formula.shared_receive_bytes);
    EXPECT_EQ(m.formula.shared_receive_bytes,
              uint64_t{shape.recv_slots} * shape.max_message_size);
  } else {
    EXPECT_EQ(m.engine_registered_bytes, 0u);
    EXPECT_EQ(m.formula.shared_receive_bytes, 0u);
  }
  const int64_t formula_heap = static_cast<int64_t>(m.formula.heap_bytes);
  EXPECT_NEAR(m.heap_bytes, formula_heap, kHeapTolerance)
      << "the connection's heap is not what the formula says";
  const uint64_t total = m.formula.registered_bytes +
                         m.formula.shared_receive_bytes +
                         static_cast<uint64_t>(m.heap_bytes);
  std::printf(
      "%s: %llu MRs, %llu B registered, %llu B shared, %lld B heap "
      "(formula %lld): %llu B per connection besides the QP\n",
      srq ? "SRQ" : "no SRQ", static_cast<unsigned long long>(m.registrations),
      static_cast<unsigned long long>(m.registered_bytes),
      static_cast<unsigned long long>(m.formula.shared_receive_bytes),
      static_cast<long long>(m.heap_bytes),
      static_cast<long long>(formula_heap),
      static_cast<unsigned long long>(total));
  if (srq) {
    EXPECT_LE(total, 16u * 1024) << "the SRQ goal: 16 KiB per connection";
  }
}

INSTANTIATE_TEST_SUITE_P(SharedReceiveQueue, EngineMemoryTest,
                         ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Srq" : "NoSrq";
                         });

}  // namespace
}  // namespace rdma_transport
