// Ring (sim/internal/ring.h): FIFO order across wrap-around and the in-place
// widening of its window, its capacity, EraseIf, and PushGrowing.
#include "sim/internal/ring.h"

#include <deque>
#include <random>

#include "gtest/gtest.h"

namespace rdma_transport::sim::internal {
namespace {

TEST(RingTest, AFewElementsAtATimeStayInTheFirstWindow) {
  Ring<int> ring(100000);
  EXPECT_EQ(ring.capacity(), 100000u);
  EXPECT_EQ(ring.window(), Ring<int>::kFirstWindow);
  for (int i = 0; i < 10000; ++i) {
    ring.Push(i);
    ring.Push(i + 1);
    ASSERT_EQ(ring.Front(), i);
    ring.Pop();
    ASSERT_EQ(ring.Front(), i + 1);
    ring.Pop();
  }
  EXPECT_EQ(ring.window(), Ring<int>::kFirstWindow);
}

TEST(RingTest, TheWindowWidensInOrderWhileWrappedUpToTheCapacity) {
  Ring<int> ring(300);
  int next_in = 0;
  int next_out = 0;
  // Wrap the head inside the first window, then fill past it.
  for (int i = 0; i < 40; ++i) ring.Push(next_in++);
  for (int i = 0; i < 30; ++i) {
    ASSERT_EQ(ring.Front(), next_out++);
    ring.Pop();
  }
  while (!ring.full()) ring.Push(next_in++);
  EXPECT_EQ(ring.size(), 300u);
  EXPECT_EQ(ring.window(), 300u);
  for (size_t i = 0; i < ring.size(); ++i) {
    ASSERT_EQ(ring.At(i), next_out + static_cast<int>(i));
  }
  while (!ring.empty()) {
    ASSERT_EQ(ring.Front(), next_out++);
    ring.Pop();
  }
  EXPECT_EQ(next_out, next_in);
}

TEST(RingTest, MatchesADequeUnderRandomUse) {
  Ring<int> ring(1000);
  std::deque<int> model;
  std::mt19937 random(7);
  int next = 0;
  for (int step = 0; step < 200000; ++step) {
    const bool push = model.empty() || (!ring.full() && random() % 100 < 52);
    if (push) {
      ring.Push(next);
      model.push_back(next++);
    } else {
      ASSERT_EQ(ring.Front(), model.front()) << step;
      ring.Pop();
      model.pop_front();
    }
    ASSERT_EQ(ring.size(), model.size());
  }
  for (size_t i = 0; i < model.size(); ++i) ASSERT_EQ(ring.At(i), model[i]);
}

TEST(RingTest, EraseIfKeepsTheOrderOfTheOthers) {
  Ring<int> ring(200);
  for (int i = 0; i < 50; ++i) ring.Push(i);
  for (int i = 0; i < 45; ++i) ring.Pop();
  for (int i = 50; i < 150; ++i) ring.Push(i);  // Widens while wrapped.
  ring.EraseIf([](int value) { return value % 2 == 1; });
  ASSERT_EQ(ring.size(), 52u);  // The even ones of 45..149.
  int expected = 46;
  while (!ring.empty()) {
    ASSERT_EQ(ring.Front(), expected);
    ring.Pop();
    expected += 2;
  }
  for (int i = 0; i < 200; ++i) ring.Push(i);
  EXPECT_TRUE(ring.full());
}

TEST(RingTest, PushGrowingDoublesTheStorageWhenFull) {
  Ring<int> ring;
  for (int i = 0; i < 1000; ++i) ring.PushGrowing(i);
  EXPECT_GE(ring.capacity(), 1000u);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(ring.Front(), i);
    ring.Pop();
  }
}

}  // namespace
}  // namespace rdma_transport::sim::internal
