#include "tests/register_for_test.h"

#include <utility>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace rdma_transport {

MemoryRegion RegisterForTest(const Context& context,
                             std::span<std::byte> memory, int access) {
  absl::StatusOr<MemoryRegion> region = context.RegisterMemory(memory, access);
  EXPECT_TRUE(region.ok()) << region.status();
  return region.ok() ? *std::move(region) : MemoryRegion();
}

}  // namespace rdma_transport
