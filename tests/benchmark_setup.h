// File: tests/benchmark_setup.h
//
// Setup helpers the simulator benchmarks share: Must() (a setup step that
// cannot fail without making the figures meaningless: aborts naming it) and
// Acceptor (accepts connections on a thread of its own, so that the
// benchmark's thread can Connect(), which waits for the server's ACCEPT).
//
//   std::unique_ptr<Listener> listener =
//       Must(Listener::Create(context, "127.0.0.1:0"), "listen");
//   Acceptor acceptor(*listener);
//   auto client = Must(Connect(other, listener->address()), "connect");
//   std::unique_ptr<Connection> server = acceptor.Take();
//
// Test-only. Acceptor: Take() may be called from any one thread; the
// accepted connections are handed over with a mutex (happens-before), so
// the taking thread may then use them (and their engine) as its own.

#ifndef RDMA_TRANSPORT_TESTS_BENCHMARK_SETUP_H_
#define RDMA_TRANSPORT_TESTS_BENCHMARK_SETUP_H_

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/connection.h"
#include "transport/listener.h"

namespace rdma_transport {

// The shape of the many-connection benchmark and memory test
// (docs/resources.md): small messages (256-byte slots), 16 credits, 8 send
// slots, batches of 4 one-sided work requests.
inline ConnectionOptions ManyConnectionShape() {
  ConnectionOptions options;
  options.recv_slots = 16;
  options.send_slots = 8;
  options.max_message_size = 256;
  options.max_rdma_batch = 4;
  return options;
}
// An engine for `connections` of that shape; with `shared_receive_queue`
// its pool holds exactly their reservations.
inline EngineOptions ManyConnectionEngine(uint32_t connections,
                                          bool shared_receive_queue) {
  EngineOptions options;
  options.max_connections = connections;
  if (shared_receive_queue) {
    options.srq_slots = connections * ManyConnectionShape().recv_slots;
    options.srq_slot_bytes = ManyConnectionShape().max_message_size;
  }
  return options;
}

template <typename T>
T Must(absl::StatusOr<T> value, const char* what) {
  if (!value.ok()) {
    std::fprintf(stderr, "benchmark setup: %s: %s\n", what,
                 value.status().ToString().c_str());
    std::abort();
  }
  return *std::move(value);
}

inline void Must(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "benchmark setup: %s: %s\n", what,
                 status.ToString().c_str());
    std::abort();
  }
}

// Accepts connections on a thread of its own, so that the benchmark thread
// can Connect() (which waits for the server's ACCEPT).
class Acceptor {
 public:
  explicit Acceptor(Listener& listener)
      : listener_(listener), thread_([this] { Loop(); }) {}
  ~Acceptor() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    thread_.join();
  }

  std::unique_ptr<Connection> Take() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !ready_.empty(); });
    std::unique_ptr<Connection> connection = std::move(ready_.front());
    ready_.pop_front();
    return connection;
  }

 private:
  void Loop() {
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) return;
      }
      absl::StatusOr<std::unique_ptr<Connection>> accepted =
          listener_.Accept(DeadlineIn(std::chrono::milliseconds(20)));
      if (accepted.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        ready_.push_back(*std::move(accepted));
        cv_.notify_all();
      } else if (!absl::IsDeadlineExceeded(accepted.status())) {
        Must(accepted.status(), "accepting");
      }
    }
  }

  Listener& listener_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Connection>> ready_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_BENCHMARK_SETUP_H_
