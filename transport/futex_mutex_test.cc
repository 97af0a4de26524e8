#include "transport/futex_mutex.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace rdma_transport {
namespace {

TEST(FutexMutexTest, TryLockFailsWhileHeldAndSucceedsOnceReleased) {
  FutexMutex mu;
  ASSERT_TRUE(mu.try_lock());
  EXPECT_FALSE(mu.try_lock());
  mu.unlock();
  EXPECT_TRUE(mu.try_lock());
  mu.unlock();
}

TEST(FutexMutexTest, ALockerThatFindsItHeldWaitsForTheUnlock) {
  FutexMutex mu;
  std::atomic<bool> acquired{false};
  mu.lock();
  std::thread other([&] {
    std::unique_lock<FutexMutex> lock(mu);
    acquired = true;
  });
  // However long the other thread runs, it cannot get in while we hold it.
  for (int i = 0; i < 1000; ++i) std::this_thread::yield();
  EXPECT_FALSE(acquired.load());
  mu.unlock();  // wakes it if it sleeps on the word
  other.join();
  EXPECT_TRUE(acquired.load());
  EXPECT_TRUE(mu.try_lock());
  mu.unlock();
}

// Contended from every side: each increment of a plain counter is only
// counted if the lock excludes the others (and TSan sees the order).
TEST(FutexMutexTest, ThreadsIncrementingUnderItLoseNothing) {
  constexpr int kThreads = 4;
  constexpr int kIncrements = 20000;
  FutexMutex mu;
  long counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements; ++i) {
        std::unique_lock<FutexMutex> lock(mu);
        ++counter;
        // Hold it across a yield now and then, so others sleep on the word.
        if (i % 512 == 0) std::this_thread::yield();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(counter, long{kThreads} * kIncrements);
}

// The Connection waits on a std::condition_variable_any with it: a value
// handed back and forth must never be lost or seen twice.
TEST(FutexMutexTest, WorksWithConditionVariableAny) {
  constexpr int kHandoffs = 2000;
  FutexMutex mu;
  std::condition_variable_any cv;
  int turn = 0;  // even: the main thread's, odd: the other's
  std::thread other([&] {
    for (int i = 0; i < kHandoffs; ++i) {
      std::unique_lock<FutexMutex> lock(mu);
      cv.wait(lock, [&] { return turn % 2 == 1; });
      ++turn;
      cv.notify_all();
    }
  });
  for (int i = 0; i < kHandoffs; ++i) {
    std::unique_lock<FutexMutex> lock(mu);
    cv.wait(lock, [&] { return turn % 2 == 0; });
    ++turn;
    cv.notify_all();
  }
  {
    std::unique_lock<FutexMutex> lock(mu);
    cv.wait(lock, [&] { return turn == 2 * kHandoffs; });
  }
  other.join();
  EXPECT_EQ(turn, 2 * kHandoffs);
}

}  // namespace
}  // namespace rdma_transport
