// File: transport/handshake_io.h
//
// Handshake frames on a setup stream (handshake.h over tcp.h): this side's
// HELLO or ACCEPT for a connection (OfferFor), and writing or reading one
// whole frame before a deadline. Shared by Connect() (connect.cc) and the
// Listener (listener_handshake.cc). Internal to //transport:transport.

#ifndef RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_IO_H_
#define RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_IO_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/connection.h"
#include "transport/deadline.h"
#include "transport/handshake.h"
#include "verbs_shim/env.h"

namespace rdma_transport {

// This side's HELLO or ACCEPT in frame format `version`. A format-3
// ACCEPT names `chosen` and leaves the probe slot to ESTABLISHED (the server
// registers nothing before READY); `accept_traffic` is what it tells the
// client to use.
HandshakeMessage OfferFor(const Connection& connection,
                          const ConnectionOptions& options, HandshakeType type,
                          uint16_t version,
                          std::optional<TrafficSettings> accept_traffic = {},
                          uint16_t chosen = kHandshakeVersion);

// Encodes `message` and writes all of it to `fd` before `deadline`.
absl::Status SendFrame(Env& env, int fd, const HandshakeMessage& message,
                       Deadline deadline);

// Reads one whole frame (header, then the body it announces) from `fd`
// before `deadline`, and decodes it.
absl::StatusOr<HandshakeMessage> ReceiveFrame(Env& env, int fd,
                                              Deadline deadline);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_IO_H_
