// EventQueue (sim/internal/event_queue.h): earliest first, equal times in
// the order committed, events read in place while others are scheduled,
// slots reused once released.
#include "sim/internal/event_queue.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace rdma_transport::sim::internal {
namespace {

using Nanos = std::chrono::nanoseconds;

struct TestEvent {
  Nanos time{0};
  uint64_t sequence = 0;
  int id = 0;
};

TEST(EventQueueTest, EarliestFirstAndEqualTimesInCommitOrder) {
  EventQueue<TestEvent> queue;
  const int64_t times[] = {50, 10, 30, 10, 50, 0, 30, 10};
  for (int i = 0; i < 8; ++i) {
    TestEvent& event = queue.Start();
    event.time = Nanos(times[i]);
    event.id = i;
    queue.Commit();
  }
  std::vector<int> order;
  while (!queue.empty()) {
    const uint32_t slot = queue.PopTop();
    order.push_back(queue.at(slot).id);
    queue.Release(slot);
  }
  EXPECT_EQ(order, (std::vector<int>{5, 1, 3, 7, 2, 6, 0, 4}));
}

TEST(EventQueueTest, AnEventStaysInItsSlotWhileOthersAreScheduled) {
  EventQueue<TestEvent> queue;
  TestEvent first;
  first.time = Nanos(1);
  first.id = 42;
  queue.Push(first);
  const uint32_t slot = queue.PopTop();
  const TestEvent& running = queue.at(slot);
  // Its handler schedules many more (the slot storage grows meanwhile).
  for (int i = 0; i < 10000; ++i) {
    TestEvent& event = queue.Start();
    event.time = Nanos(2 + i % 7);
    event.id = i;
    queue.Commit();
  }
  EXPECT_EQ(running.id, 42);
  EXPECT_EQ(running.time, Nanos(1));
  queue.Release(slot);
  // The released slot is the next one used, as a blank event.
  TestEvent& reused = queue.Start();
  EXPECT_EQ(&reused, &running);
  EXPECT_EQ(reused.id, 0);
  reused.time = Nanos(100);
  queue.Commit();
  EXPECT_EQ(queue.size(), 10001u);
}

TEST(EventQueueTest, MatchesAnOrderedMapUnderRandomUse) {
  EventQueue<TestEvent> queue;
  std::map<std::pair<int64_t, int>, int> model;  // (time, commit #) -> id
  std::mt19937 random(99);
  int committed = 0;
  int64_t now = 0;
  for (int step = 0; step < 100000; ++step) {
    if (model.empty() || random() % 100 < 55) {
      TestEvent& event = queue.Start();
      event.time = Nanos(now + static_cast<int64_t>(random() % 1000));
      event.id = step;
      model[{event.time.count(), committed++}] = step;
      queue.Commit();
    } else {
      ASSERT_EQ(queue.TopTime().count(), model.begin()->first.first);
      const uint32_t slot = queue.PopTop();
      ASSERT_EQ(queue.at(slot).id, model.begin()->second) << step;
      now = queue.at(slot).time.count();
      model.erase(model.begin());
      queue.Release(slot);
    }
    ASSERT_EQ(queue.size(), model.size());
  }
  size_t seen = 0;
  queue.ForEach([&](const TestEvent&) { ++seen; });
  EXPECT_EQ(seen, model.size());
}

}  // namespace
}  // namespace rdma_transport::sim::internal
