// File: tests/connection_test_peer.h
//
// `ConnectionTestPeer` reaches into a Connection for what only a test needs:
// making its process "die" as the kernel would show it to the peer. Test-only.
//
//   ConnectionTestPeer::SimulateProcessExit(*server);
//   // the client's next wait fails at once with kUnavailable

#ifndef RDMA_TRANSPORT_TESTS_CONNECTION_TEST_PEER_H_
#define RDMA_TRANSPORT_TESTS_CONNECTION_TEST_PEER_H_

#include <sys/socket.h>

#include <mutex>

#include "transport/connection.h"

namespace rdma_transport {

class ConnectionTestPeer {
 public:
  // The peer reads EOF on the setup stream with no goodbye, as when this
  // process is killed: the kernel closes its sockets. (The QP lives on, as a
  // NIC's QP does until the kernel gets round to it; nothing else is sent.)
  static void SimulateProcessExit(Connection& connection) {
    std::lock_guard<std::mutex> lock(connection.mu_);
    if (connection.setup_.valid()) {
      ::shutdown(connection.setup_.fd(), SHUT_RDWR);
    }
    connection.setup_watched_ = false;
    connection.peer_goodbye_ = true;  // nothing more to learn from it
  }
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_CONNECTION_TEST_PEER_H_
