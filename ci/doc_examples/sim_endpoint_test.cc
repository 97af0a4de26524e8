// Harness of ci/doc_examples.sh: the docs/simulator.md block that continues
// the Quick start file goes where the marker line is.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_testing.h"
#include "sim/sim_verbs.h"

using namespace rdma_transport;

// doc-example block
