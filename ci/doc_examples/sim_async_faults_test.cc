// Harness of ci/doc_examples.sh: the docs/simulator.md blocks of
// async-event and scheduled faults, compiled (not run: the devices, QPs and
// CQs they name are only declared here).
#include <chrono>
#include <string>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/fault_injector.h"
#include "sim/sim_verbs.h"

namespace rdma_transport::sim {

[[maybe_unused]] void DocExample(Fabric& fabric, SimVerbs& verbs, ibv_qp* qp,
                                 ibv_cq* cq, const ibv_gid& gid,
                                 const std::string& b,
                                 ibv_send_wr* chain_of_sixteen) {
  FaultInjector& faults = fabric.faults();
  ibv_send_wr* bad = nullptr;
  // doc-example block
}

TEST(DocExample, Compiles) { SUCCEED(); }

}  // namespace rdma_transport::sim
