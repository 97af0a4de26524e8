// File: tests/test_backend.h
//
// The end-to-end suite is written once, against the transport API, and run
// on every backend. A `TestBackend` is what differs: where the verbs come
// from, which two devices the client and the server use, and how a peer is
// made to vanish. Each backend is a library defining MakeTestBackend(); a
// test binary links exactly one:
//
//   //tests:e2e_sim_test       sim: two simulated ConnectX-7s in one process
//   //tests:e2e_ibverbs_test   libibverbs: RDMA_TEST_CLIENT_DEVICE /
//                              RDMA_TEST_SERVER_DEVICE (default rxe0, rxe1)
//
// Environment for every backend:
//   RDMA_TEST_SCALE   percent of the default iteration counts (default 100);
//                     fewer iterations, never fewer cases
//   RDMA_TEST_LISTEN  host:port the server listens on (default 127.0.0.1:0)
//
// A backend is created per test and is not thread-safe itself; the Verbs it
// hands out is.

#ifndef RDMA_TRANSPORT_TESTS_TEST_BACKEND_H_
#define RDMA_TRANSPORT_TESTS_TEST_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/listener.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport {

namespace sim {
class Fabric;
}  // namespace sim

class Connection;

class TestBackend {
 public:
  virtual ~TestBackend() = default;

  virtual std::string name() const = 0;
  virtual Verbs& verbs() = 0;
  virtual std::string client_device() const = 0;
  virtual std::string server_device() const = 0;

  // Makes the side that owns `connection` vanish without a word, as a peer
  // whose host died: on the sim its NIC leaves the fabric; on real verbs its
  // QP is moved to ERR, so it neither answers nor acknowledges.
  virtual absl::Status KillPeer(Connection& connection) = 0;

  // The simulated fabric, or null on real verbs (for checks only the
  // simulator can make: NIC counters, the leak report).
  virtual sim::Fabric* fabric() { return nullptr; }
};

// Defined by the backend library linked into the test.
absl::StatusOr<std::unique_ptr<TestBackend>> MakeTestBackend();

// RDMA_TEST_SCALE applied to `count` (at least 1).
int Scaled(int count);
// RDMA_TEST_LISTEN, or "127.0.0.1:0".
std::string ListenAddress();
// For a Listener on ListenAddress(): the VM's private network needs no token
// unless the test sets one.
ListenerOptions TestListenerOptions();

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_TEST_BACKEND_H_
