// File: transport/connect.h
//
// Connect(): the client side of making a connection. It dials a Listener
// (listener.h) over the Context's setup channel (TCP; on a virtual-time
// simulator its in-memory network, see sim/sim_env.h) and runs the
// handshake of handshake.h: the QP and rings are made first, then HELLO,
// ACCEPT, the QP brought up with the negotiated path, READY, and (protocol
// 3) ESTABLISHED. The setup stream stays open for the connection's life
// (connection.h, "Liveness").
//
//   absl::StatusOr<std::unique_ptr<Connection>> connection =
//       Connect(client_context, "10.0.0.1:18515", options);
//
// Errors: kFailedPrecondition when the server rejects (with its reason),
// kUnavailable when it stays busy (every "server busy" or "displaced"
// answer is retried after the time it names, while `handshake_timeout`
// lasts), when it cannot be reached or goes away, kDeadlineExceeded when
// the handshake does not finish within `handshake_timeout`,
// kInvalidArgument for a malformed reply or a bad
// ConnectionOptions::max_protocol_version, and the verbs error when the QP
// cannot be created or brought up. Connection::path() then says what was
// negotiated (transport/negotiation.h). A server that predates protocol 3
// is retried at once in frame format 2.
//
// Thread-safety: Connect() is thread-safe. The connection must be destroyed
// before the Context.

#ifndef RDMA_TRANSPORT_TRANSPORT_CONNECT_H_
#define RDMA_TRANSPORT_TRANSPORT_CONNECT_H_

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "transport/connection.h"
#include "transport/context.h"

namespace rdma_transport {

absl::StatusOr<std::unique_ptr<Connection>> Connect(
    const Context& context, std::string_view address,
    const ConnectionOptions& options = {});

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_CONNECT_H_
