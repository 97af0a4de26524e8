#include "transport/connection_lock.h"

#include <atomic>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"

namespace rdma_transport {
namespace {

TEST(ConnectionLockTest, SharedExcludesAnotherThreadUntilTheUnlock) {
  ConnectionLock mu(ThreadMode::kShared);
  EXPECT_FALSE(mu.serialized());
  std::atomic<bool> acquired{false};
  mu.lock();
  std::thread other([&] {
    std::unique_lock<ConnectionLock> lock(mu);
    acquired = true;
  });
  for (int i = 0; i < 1000; ++i) std::this_thread::yield();
  EXPECT_FALSE(acquired.load());
  mu.unlock();
  other.join();
  EXPECT_TRUE(acquired.load());
}

TEST(ConnectionLockTest, SerializedTryLockFailsWhileHeldAndSucceedsAfter) {
  ConnectionLock mu(ThreadMode::kSerialized);
  EXPECT_TRUE(mu.serialized());
  ASSERT_TRUE(mu.try_lock());
  EXPECT_FALSE(mu.try_lock());
  mu.unlock();
  EXPECT_TRUE(mu.try_lock());
  mu.unlock();
  { std::unique_lock<ConnectionLock> lock(mu); }
  EXPECT_TRUE(mu.try_lock());
  mu.unlock();
}

// Handed from thread to thread with the caller's own synchronisation (here
// a mutex): what kSerialized promises. Under TSan the counter's accesses are
// ordered by that mutex alone, as a connection's state would be.
TEST(ConnectionLockTest, SerializedHandedBetweenThreadsByTheirOwnMutex) {
  ConnectionLock mu(ThreadMode::kSerialized);
  std::mutex handover;
  int counter = 0;  // the state the lock "guards"
  auto work = [&] {
    for (int i = 0; i < 1000; ++i) {
      std::lock_guard<std::mutex> turn(handover);
      std::unique_lock<ConnectionLock> lock(mu);
      ++counter;
    }
  };
  std::thread a(work);
  std::thread b(work);
  a.join();
  b.join();
  EXPECT_EQ(counter, 2000);
}

TEST(ConnectionLockDeathTest, SerializedCallsThatOverlapAbortNamingTheMode) {
  ConnectionLock mu(ThreadMode::kSerialized);
  mu.lock();
  EXPECT_DEATH(mu.lock(),
               "two calls at once on a connection made with "
               "ThreadMode::kSerialized");
  mu.unlock();
}

}  // namespace
}  // namespace rdma_transport
