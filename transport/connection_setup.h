// File: transport/connection_setup.h
//
// `ConnectionSetup`: the friend of Connection that builds and establishes
// one, for the two sides of the handshake (connect.cc, listener.cc,
// listener_handshake.cc): a whole connection or a shell (CQ and QP in RESET,
// nothing registered), its buffers later, a new name or PSN for a reused
// shell, and the handshake's results handed in. Static functions only;
// each runs under the Connection's own rules (connection.h). Internal to
// //transport:transport.

#ifndef RDMA_TRANSPORT_TRANSPORT_CONNECTION_SETUP_H_
#define RDMA_TRANSPORT_TRANSPORT_CONNECTION_SETUP_H_

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/connection.h"
#include "transport/handshake.h"
#include "transport/tcp.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {

// The friend of Connection that builds and establishes one.
class ConnectionSetup {
 public:
  // Queues and registered buffers both (a client, or a protocol-2 server).
  static absl::StatusOr<std::unique_ptr<Connection>> Create(
      const Context& context, const ConnectionOptions& options,
      std::string name) {
    absl::StatusOr<std::unique_ptr<Connection>> connection =
        CreateShell(context, options, std::move(name));
    if (!connection.ok()) return connection;
    if (absl::Status status = CreateBuffers(**connection); !status.ok()) {
      return status;
    }
    return connection;
  }
  // The CQ and a QP left in RESET, nothing registered: what a protocol-3
  // server commits before the peer's READY.
  static absl::StatusOr<std::unique_ptr<Connection>> CreateShell(
      const Context& context, const ConnectionOptions& options,
      std::string name) {
    std::unique_ptr<Connection> connection(
        new Connection(context, options, std::move(name)));
    if (absl::Status status = connection->CreateQueues(); !status.ok()) {
      return WithContext(status, connection->name());
    }
    return connection;
  }
  static absl::Status CreateBuffers(Connection& connection) {
    if (absl::Status status = connection.CreateBuffers(); !status.ok()) {
      return WithContext(status, connection.name());
    }
    return absl::OkStatus();
  }
  static void Rename(Connection& connection, std::string name) {
    connection.name_ = std::move(name);
  }
  static void NewPsn(Connection& connection) {
    connection.psn_ = random() & 0xffffff;
  }
  static QpEndpoint LocalEndpoint(const Connection& connection) {
    return connection.LocalEndpoint();
  }
  static uint32_t OfferedSlotSize(const Connection& connection) {
    return connection.OfferedSlotSize();
  }
  static RemoteRegion ProbeTarget(const Connection& connection) {
    return connection.ProbeTarget();
  }
  // The peer's probe slot as a HELLO, ACCEPT or ESTABLISHED names it.
  static RemoteRegion PeerProbe(const HandshakeMessage& peer) {
    RemoteRegion probe;
    probe.address = peer.probe_address;
    probe.rkey = peer.probe_rkey;
    probe.length = peer.probe_rkey != 0 ? 1 : 0;
    return probe;
  }
  static absl::Status Establish(Connection& connection,
                                const HandshakeMessage& peer,
                                const ConnectionPath& path) {
    return connection.Establish(peer.endpoint, peer.recv_slots, peer.slot_size,
                                PeerProbe(peer), path);
  }
  static void SetPeerProbe(Connection& connection,
                           const HandshakeMessage& established) {
    connection.SetPeerProbe(PeerProbe(established));
  }
  static void AdoptSetupStream(Connection& connection, Socket stream) {
    connection.AdoptSetupStream(std::move(stream));
  }
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_CONNECTION_SETUP_H_
