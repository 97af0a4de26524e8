// Harness of ci/doc_examples.sh: a docs/simulator.md block of whole
// functions and tests, written as a downstream test file would be inside
// namespace rdma_transport (sim::, Context, Connection, Env, ...), compiled
// and run.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "transport/config.h"
#include "transport/connection.h"
#include "transport/context.h"
#include "transport/listener.h"
#include "verbs_shim/env_thread.h"

namespace rdma_transport {

// doc-example block

}  // namespace rdma_transport
