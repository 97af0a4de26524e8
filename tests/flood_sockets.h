// File: tests/flood_sockets.h
//
// The two ends of a listener flood test with real sockets on 127.0.0.x:
// the flood's client sockets (opened non-blocking, waited on, polled for
// whether the listener has closed them yet) and `ServerLoop`, the server
// that Accept()s on its own thread meanwhile.
//
//   if (RaiseOpenFileLimit() < 2 * kSockets + 200) GTEST_SKIP();
//   std::vector<std::unique_ptr<Connection>> accepted;
//   FloodSockets flood;
//   ServerLoop server(*listener, accepted);
//   flood.fds.push_back(OpenFloodSocket(listener->address()));
//   ASSERT_TRUE(WaitConnected(flood.fds, DeadlineIn(seconds(30))));
//   ... real Connect()s ...
//   server.Stop();
//   EXPECT_EQ(StillOpen(flood.fds), 0);
//
// Test-only. The socket functions are thread-safe (each works on the
// descriptors it is given); a ServerLoop is stopped from one thread.

#ifndef RDMA_TRANSPORT_TESTS_FLOOD_SOCKETS_H_
#define RDMA_TRANSPORT_TESTS_FLOOD_SOCKETS_H_

#include <sys/resource.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/connection.h"
#include "transport/deadline.h"
#include "transport/listener.h"

namespace rdma_transport {

// Raises this process's soft RLIMIT_NOFILE to its hard limit (a flood
// needs thousands of descriptors) and returns the soft limit then in force;
// 0 when it cannot be read.
rlim_t RaiseOpenFileLimit();

// A non-blocking TCP socket connecting to `address` ("127.0.0.1:port"),
// bound to `source` ("127.0.0.2") first unless that is empty (then the
// kernel picks); -1 when it cannot be opened.
int OpenFloodSocket(const std::string& address, const std::string& source = "");

// Waits until every socket in `fds` is connected (writable); false at the
// deadline, or when one fails.
bool WaitConnected(const std::vector<int>& fds, Deadline deadline);

// Flood sockets the server has not closed yet (no FIN or RST seen).
int StillOpen(const std::vector<int>& fds);

// The flood's client ends, closed at the end of the test however it ends.
struct FloodSockets {
  std::vector<int> fds;
  ~FloodSockets();
};

// Accept() in a loop on its own thread until Stop() (or destruction),
// appending each connection to `accepted`, which must outlive the loop.
// The thread's allocations are charged to `heap_tag`
// (tests/counting_allocator.h).
class ServerLoop {
 public:
  ServerLoop(Listener& listener,
             std::vector<std::unique_ptr<Connection>>& accepted,
             int heap_tag = 0);
  ~ServerLoop() { Stop(); }
  void Stop();
  // How many connections it has accepted so far.
  size_t accepted_count();

 private:
  std::vector<std::unique_ptr<Connection>>& accepted_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;  // guards accepted_ while the thread runs
  std::thread thread_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_FLOOD_SOCKETS_H_
