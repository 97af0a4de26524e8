#include "transport/ready_queue.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>

#include "gtest/gtest.h"

namespace rdma_transport {
namespace {

TEST(ReadyQueueTest, SlotsComeOutInTheOrderTheyBecameReady) {
  ReadyQueue ready;
  ready.Reset(8);
  EXPECT_TRUE(ready.empty());
  EXPECT_EQ(ready.Pop(), ReadyQueue::kNone);
  for (uint32_t slot : {5u, 0u, 7u}) EXPECT_TRUE(ready.Push(slot));
  EXPECT_EQ(ready.size(), 3u);
  EXPECT_EQ(ready.Pop(), 5u);
  EXPECT_EQ(ready.Pop(), 0u);
  EXPECT_EQ(ready.Pop(), 7u);
  EXPECT_EQ(ready.Pop(), ReadyQueue::kNone);
}

TEST(ReadyQueueTest, ASlotAlreadyQueuedKeepsItsPlace) {
  ReadyQueue ready;
  ready.Reset(4);
  ready.Push(1);
  ready.Push(2);
  EXPECT_FALSE(ready.Push(1));
  EXPECT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready.Pop(), 1u);
  EXPECT_TRUE(ready.Push(1));  // out, then back in at the tail
  EXPECT_EQ(ready.Pop(), 2u);
  EXPECT_EQ(ready.Pop(), 1u);
}

TEST(ReadyQueueTest, RemovingFromTheHeadTheMiddleAndTheTail) {
  ReadyQueue ready;
  ready.Reset(6);
  for (uint32_t slot = 0; slot < 6; ++slot) ready.Push(slot);
  ready.Remove(0);  // head
  ready.Remove(3);  // middle
  ready.Remove(5);  // tail
  ready.Remove(3);  // not queued: nothing
  EXPECT_FALSE(ready.contains(3));
  EXPECT_EQ(ready.size(), 3u);
  EXPECT_EQ(ready.Pop(), 1u);
  EXPECT_EQ(ready.Pop(), 2u);
  EXPECT_EQ(ready.Pop(), 4u);
  EXPECT_TRUE(ready.empty());
  ready.Push(5);  // the tail removed earlier goes in again
  EXPECT_EQ(ready.Pop(), 5u);
}

// Against a model (a deque with a membership test), random operations.
TEST(ReadyQueueTest, AgreesWithAModelOverRandomOperations) {
  constexpr uint32_t kSlots = 64;
  ReadyQueue ready;
  ready.Reset(kSlots);
  std::deque<uint32_t> model;
  std::mt19937 random(42);
  for (int step = 0; step < 100000; ++step) {
    const uint32_t slot = random() % kSlots;
    switch (random() % 3) {
      case 0: {
        const bool absent =
            std::find(model.begin(), model.end(), slot) == model.end();
        ASSERT_EQ(ready.Push(slot), absent);
        if (absent) model.push_back(slot);
        break;
      }
      case 1: {
        const uint32_t want = model.empty() ? ReadyQueue::kNone : model.front();
        if (!model.empty()) model.pop_front();
        ASSERT_EQ(ready.Pop(), want);
        break;
      }
      default:
        ready.Remove(slot);
        model.erase(std::remove(model.begin(), model.end(), slot), model.end());
    }
    ASSERT_EQ(ready.size(), model.size());
  }
}

}  // namespace
}  // namespace rdma_transport
