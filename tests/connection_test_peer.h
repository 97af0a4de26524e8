// File: tests/connection_test_peer.h
//
// `ConnectionTestPeer` reaches into a Connection for what only a test needs:
// making its process "die" as the kernel would show it to the peer, sending
// what a broken or hostile peer would, and counting what its waits did.
// Test-only.
//
//   ConnectionTestPeer::SimulateProcessExit(*server);
//   // the client's next wait fails at once with kUnavailable
//   ConnectionTestPeer::PostRawMessage(*client, imm, payload);

#ifndef RDMA_TRANSPORT_TESTS_CONNECTION_TEST_PEER_H_
#define RDMA_TRANSPORT_TESTS_CONNECTION_TEST_PEER_H_

#include <arpa/inet.h>
#include <sys/socket.h>

#include <mutex>
#include <span>

#include "absl/status/status.h"
#include "transport/connection.h"

namespace rdma_transport {

class ConnectionTestPeer {
 public:
  // The peer reads EOF on the setup stream with no goodbye, as when this
  // process is killed: the kernel closes its sockets. (The QP lives on, as a
  // NIC's QP does until the kernel gets round to it; nothing else is sent.)
  static void SimulateProcessExit(Connection& connection) {
    std::lock_guard<ConnectionLock> lock(connection.mu_);
    if (connection.setup_.valid()) {
      ::shutdown(connection.setup_.fd(), SHUT_RDWR);
    }
    connection.setup_watched_ = false;
    connection.peer_goodbye_ = true;  // nothing more to learn from it
  }

  // The connection's lock, for a test to hold as a call in another thread
  // would (connection_lock.h).
  static ConnectionLock& Lock(Connection& connection) { return connection.mu_; }

  // PAUSE instructions the connection's busy-poll waits have executed.
  static uint64_t SpinPauses(const Connection& connection) {
    std::lock_guard<ConnectionLock> lock(connection.mu_);
    return connection.spin_pauses_;
  }

  // Posts a SEND_WITH_IMM of `payload` (inline: at most usable_inline()
  // bytes) with immediate `imm` (host order), spending a credit as a message
  // would, whatever the immediate says.
  static absl::Status PostRawMessage(Connection& connection, uint32_t imm,
                                     std::span<const std::byte> payload) {
    std::lock_guard<ConnectionLock> lock(connection.mu_);
    ibv_sge sge{reinterpret_cast<uint64_t>(payload.data()),
                static_cast<uint32_t>(payload.size()), 0};
    ibv_send_wr wr = {};
    wr.wr_id = MakeWrId(WrKind::kSendData, connection.engine_slot_, 0);
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htonl(imm);
    wr.sg_list = &sge;
    wr.num_sge = payload.empty() ? 0 : 1;
    wr.send_flags = IBV_SEND_INLINE;
    absl::Status status = connection.PostSendLocked(&wr, 1);
    if (status.ok()) connection.send_credits_.Spend();
    return status;
  }
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_CONNECTION_TEST_PEER_H_
