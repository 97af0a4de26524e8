// Harness of ci/doc_examples.sh: docs/simulator.md's virtual-time test.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "transport/connection.h"
#include "transport/context.h"
#include "transport/listener.h"
#include "verbs_shim/env.h"
#include "verbs_shim/env_thread.h"

using namespace rdma_transport;

// doc-example block
