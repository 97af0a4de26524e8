// File: tests/engine_fixture.h
//
// The Engine tests' fixture (transport/engine.h) on the simulator: two NICs
// with a Context each, one Engine on the client's, pairs dialled with the
// client side on the engine and the server side on its own CQ, and a loop
// that drives the engine in virtual time until a condition holds. The fabric
// runs in kImmediate mode (each verbs call runs it to quiescence) unless a
// test asks for kManual (work moves only while the engine waits, or when the
// test steps the fabric: operations really are in flight). Also the memory
// of one connection's one-sided workload (`Lane`). Test-only, one thread.
//
//   class MyTest : public EngineTest {
//    protected:
//     MyTest() : EngineTest(sim::ProgressMode::kManual) {}
//   };
//   TEST_F(MyTest, X) {
//     ConnectPairs(2);
//     ... clients_[0]->PostWrite(ops) ...
//     Drive([&] { return ended == posted; },
//           [&](const Completion& c) { ++ended; });
//   }

#ifndef RDMA_TRANSPORT_TESTS_ENGINE_FIXTURE_H_
#define RDMA_TRANSPORT_TESTS_ENGINE_FIXTURE_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "transport/connection.h"
#include "transport/context.h"
#include "transport/engine.h"
#include "transport/memory_region.h"

namespace rdma_transport {

class EngineTest : public ::testing::Test {
 protected:
  explicit EngineTest(sim::ProgressMode mode = sim::ProgressMode::kImmediate)
      : mode_(mode) {}

  void SetUp() override;
  void TearDown() override;

  // `n` pairs: clients on the engine, servers on their own CQs.
  void ConnectPairs(int n, ConnectionOptions options = {});
  MemoryRegion Register(int side, std::vector<std::byte>& memory, int access);

  // Progresses the engine until `done()`, handing each completion to
  // `on_completion`; fails the test if no operation ends for 10 s
  // (virtual; other completions, keepalives say, do not count).
  template <typename Done, typename OnCompletion>
  void Drive(Done done, OnCompletion on_completion) {
    Deadline last_end = env().Now();
    while (true) {
      while (std::optional<Completion> c = engine_->NextCompletion()) {
        on_completion(*c);
        last_end = env().Now();
      }
      if (done()) return;
      ASSERT_LT(env().Now() - last_end, kStall)
          << "no operation ended for 10 s (virtual)";
      if (engine_->Progress() > 0) continue;
      const absl::Status waited = engine_->Wait(last_end + kStall);
      ASSERT_TRUE(waited.ok() || absl::IsDeadlineExceeded(waited)) << waited;
    }
  }
  static constexpr std::chrono::seconds kStall{10};

  Env& env() { return fabric_->env(); }

  const sim::ProgressMode mode_;
  std::unique_ptr<sim::Fabric> fabric_;
  std::unique_ptr<sim::SimVerbs> verbs_;
  std::vector<std::string> devices_;
  std::vector<std::unique_ptr<Context>> contexts_;
  std::unique_ptr<Engine> engine_;
  std::vector<std::unique_ptr<Connection>> clients_;
  std::vector<std::unique_ptr<Connection>> servers_;
};

// One connection's memory: what the client writes from, the server's
// target, and where the client reads it back into; `remote_source` (on the
// server) is what READs read when a test keeps them apart from the WRITEs.
struct Lane {
  std::vector<std::byte> source, target, readback, remote_source;
  MemoryRegion source_mr, target_mr, readback_mr, remote_source_mr;
};

// Every op of the workloads is at most kOpSpan bytes at op * kOpSpan.
inline constexpr size_t kOpSpan = 512;
size_t OpLength(size_t lane, size_t op);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_ENGINE_FIXTURE_H_
