// File: tests/register_for_test.h
//
// RegisterForTest(): memory registered on a Context inside a gtest, with
// the failure reported as a test failure (and an empty region returned) so
// a fixture's helper does not repeat the check. Test-only.
//
//   MemoryRegion source = RegisterForTest(context, bytes, kLocalOnly);

#ifndef RDMA_TRANSPORT_TESTS_REGISTER_FOR_TEST_H_
#define RDMA_TRANSPORT_TESTS_REGISTER_FOR_TEST_H_

#include <cstddef>
#include <span>

#include "transport/context.h"
#include "transport/memory_region.h"

namespace rdma_transport {

MemoryRegion RegisterForTest(const Context& context,
                             std::span<std::byte> memory, int access);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_REGISTER_FOR_TEST_H_
