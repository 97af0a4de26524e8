// Harness of ci/doc_examples.sh: a docs/simulator.md list of FaultInjector
// calls, compiled (not run: the devices it names do not exist here).
#include <cerrno>
#include <chrono>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/fault_injector.h"

namespace rdma_transport::sim {

[[maybe_unused]] void DocExample(Fabric& fabric) {
  FaultInjector& faults = fabric.faults();
  // doc-example block
}

TEST(DocExample, Compiles) { SUCCEED(); }

}  // namespace rdma_transport::sim
