// File: tests/measuring_verbs.h
//
// Who holds what, side by side in one process: `MeasuringVerbs` charges the
// memory a connection's verbs calls take to the heap tag of the calling
// thread (tests/counting_allocator.h), and `TwoDevices` is the fixture that
// puts it between the transport and two simulated NICs on the wall clock.
// A test runs each side of a connection on a thread tagged kClient or
// kServer and reads what each holds:
//
//   class MyTest : public TwoDevices {};
//   TEST_F(MyTest, Holds) {
//     const int64_t before = verbs_.registered[kServer].load();
//     std::thread server([&] {
//       ScopedHeapTag tag(kServer);
//       accepted = listener->Accept(deadline);
//     });
//     ...
//     EXPECT_EQ(verbs_.registered[kServer].load() - before, RingBytes(o));
//   }
//
// A binary using these must link //tests:counting_allocator statically
// (linkstatic = True); TwoDevices fails a test whose operator new is not
// the counting one. MeasuringVerbs is thread-safe (atomics, and a mutex for
// its table of regions); the fixture is driven from the test's thread.

#ifndef RDMA_TRANSPORT_TESTS_MEASURING_VERBS_H_
#define RDMA_TRANSPORT_TESTS_MEASURING_VERBS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/counting_allocator.h"
#include "transport/context.h"
#include "verbs_shim/verbs_wrapper.h"

namespace rdma_transport {

// The heap tags of these tests: the test's own allocations, and each side's.
enum Side : int { kOther = 0, kClient = 1, kServer = 2 };

// Charges each verbs call's heap bytes and registrations to the calling
// thread's heap tag: `registered` the bytes of the memory regions it
// registered and has not deregistered (on any thread), `qp_bytes` and
// `cq_bytes` the heap its CreateQp/CreateCq calls kept.
class MeasuringVerbs : public VerbsWrapper {
 public:
  using VerbsWrapper::VerbsWrapper;

  std::atomic<int64_t> registered[kHeapTags] = {};
  std::atomic<int64_t> qp_bytes[kHeapTags] = {};
  std::atomic<int64_t> cq_bytes[kHeapTags] = {};

  absl::StatusOr<ibv_mr*> RegMr(ibv_pd* pd, void* addr, size_t length,
                                int access) override;
  absl::Status DeregMr(ibv_mr* mr) override;
  absl::StatusOr<ibv_cq*> CreateCq(ibv_context* context, int cqe,
                                   void* cq_context, ibv_comp_channel* channel,
                                   int comp_vector) override;
  absl::StatusOr<ibv_qp*> CreateQp(ibv_pd* pd,
                                   ibv_qp_init_attr* init_attr) override;

 private:
  std::mutex mu_;
  std::map<ibv_mr*, int> mr_tags_;  // the side that registered each region
};

// Two cx7 NICs on a wall-clock fabric, a Context on each through
// MeasuringVerbs: real sockets flood the listener and real threads race in
// these tests, so the transport runs on the wall clock and sets up over
// TCP. TearDown checks the fabric has nothing left.
class TwoDevices : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  Context& client_context() { return *contexts_[0]; }
  Context& server_context() { return *contexts_[1]; }

  static sim::FabricOptions WallClock();
  sim::Fabric fabric_{WallClock()};
  sim::SimVerbs sim_verbs_{&fabric_};
  MeasuringVerbs verbs_{&sim_verbs_};
  std::vector<std::unique_ptr<Context>> contexts_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_MEASURING_VERBS_H_
