// PayloadPool (sim/internal/payload_pool.h): size classes, last-in-first-out
// reuse across owners, handles that stay valid while others are made.
#include "sim/internal/payload_pool.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace rdma_transport::sim::internal {
namespace {

TEST(PayloadPoolTest, ClassesArePowersOfTwoFrom64Bytes) {
  EXPECT_EQ(PayloadPool::ClassBytes(0), 64u);
  EXPECT_EQ(PayloadPool::ClassBytes(1), 64u);
  EXPECT_EQ(PayloadPool::ClassBytes(64), 64u);
  EXPECT_EQ(PayloadPool::ClassBytes(65), 128u);
  EXPECT_EQ(PayloadPool::ClassBytes(4096), 4096u);
  EXPECT_EQ(PayloadPool::ClassBytes(4097), 8192u);
  EXPECT_EQ(PayloadPool::ClassBytes(0xFFFFFFFFu), uint64_t{1} << 32);
}

TEST(PayloadPoolTest, AReleasedBufferIsTheNextOneOfItsClass) {
  PayloadPool pool;
  const uint32_t first = pool.Acquire(100);
  const uint32_t second = pool.Acquire(128);
  EXPECT_NE(first, second);
  EXPECT_NE(pool.Data(first), pool.Data(second));
  pool.Release(first);
  pool.Release(second);
  // Last released, first reused: the buffer still in the cache.
  EXPECT_EQ(pool.Acquire(65), second);
  EXPECT_EQ(pool.Acquire(128), first);
  EXPECT_EQ(pool.buffers(), 2u);
  EXPECT_EQ(pool.bytes(), 256u);
  EXPECT_EQ(pool.in_use(), 2u);
}

TEST(PayloadPoolTest, ClassesDoNotShareBuffers) {
  PayloadPool pool;
  const uint32_t small = pool.Acquire(32);
  pool.Release(small);
  const uint32_t large = pool.Acquire(4096);
  EXPECT_NE(large, small);
  EXPECT_EQ(pool.buffers(), 2u);
  EXPECT_EQ(pool.bytes(), 64u + 4096u);
  EXPECT_EQ(pool.in_use(), 1u);
  // The small one is still there for the next small packet.
  EXPECT_EQ(pool.Acquire(1), small);
}

TEST(PayloadPoolTest, BuffersKeepTheirBytesWhileOthersAreMade) {
  PayloadPool pool;
  std::vector<uint32_t> held;
  for (int i = 0; i < 1000; ++i) {
    held.push_back(pool.Acquire(4096));
    std::memset(pool.Data(held.back()), i & 0xFF, 4096);
  }
  for (int i = 0; i < 1000; ++i) {
    const uint8_t* data = pool.Data(held[i]);
    ASSERT_EQ(data[0], i & 0xFF) << i;
    ASSERT_EQ(data[4095], i & 0xFF) << i;
  }
  for (uint32_t buffer : held) pool.Release(buffer);
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(pool.buffers(), 1000u);
}

TEST(PayloadPoolTest, HandlesAreNeverTheNoPayloadMarker) {
  PayloadPool pool;
  for (uint32_t bytes : {0u, 64u, 4096u, 1u << 20}) {
    EXPECT_NE(pool.Acquire(bytes), 0xFFFFFFFFu) << bytes;
  }
}

}  // namespace
}  // namespace rdma_transport::sim::internal
