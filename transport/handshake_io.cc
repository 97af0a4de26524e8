// File: transport/handshake_io.cc
//
// Handshake frames on a setup stream (handshake_io.h).

#include "transport/handshake_io.h"

#include <vector>

#include "transport/connection_setup.h"
#include "transport/negotiation.h"
#include "transport/tcp.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {

HandshakeMessage OfferFor(const Connection& connection,
                          const ConnectionOptions& options, HandshakeType type,
                          uint16_t version,
                          std::optional<TrafficSettings> accept_traffic,
                          uint16_t chosen) {
  HandshakeMessage message;
  message.type = type;
  message.version = version;
  message.endpoint = ConnectionSetup::LocalEndpoint(connection);
  message.recv_slots = options.recv_slots;
  message.slot_size = ConnectionSetup::OfferedSlotSize(connection);
  if (type == HandshakeType::kHello) message.token = options.token;
  if (version < kHandshakeVersion || type == HandshakeType::kHello) {
    const RemoteRegion probe = ConnectionSetup::ProbeTarget(connection);
    message.probe_address = probe.address;
    message.probe_rkey = probe.rkey;
  }
  if (version >= kHandshakeVersion) {
    if (type == HandshakeType::kAccept) {
      message.min_version = chosen;
      message.max_version = chosen;
      message.traffic = accept_traffic;
    } else {
      message.min_version = kMinHandshakeVersion;
      message.max_version = kHandshakeVersion;
      message.traffic = LocalTraffic(connection.context());
    }
    message.read_depth = LocalReadDepth(connection.context());
    message.messaging = MessagingFeatures{options.rendezvous};
  }
  return message;
}

absl::Status SendFrame(Env& env, int fd, const HandshakeMessage& message,
                       Deadline deadline) {
  absl::StatusOr<std::vector<uint8_t>> frame = EncodeHandshake(message);
  if (!frame.ok()) return frame.status();
  return WriteAll(env, fd, *frame, deadline);
}

absl::StatusOr<HandshakeMessage> ReceiveFrame(Env& env, int fd,
                                              Deadline deadline) {
  uint8_t header_bytes[kHandshakeHeaderSize];
  if (absl::Status status = ReadExact(env, fd, header_bytes, deadline);
      !status.ok()) {
    return WithContext(status, "handshake");
  }
  absl::StatusOr<HandshakeHeader> header = DecodeHandshakeHeader(header_bytes);
  if (!header.ok()) return header.status();
  std::vector<uint8_t> body(header->body_length);
  if (absl::Status status = ReadExact(env, fd, body, deadline); !status.ok()) {
    return WithContext(status, "handshake");
  }
  return DecodeHandshakeBody(*header, body);
}

}  // namespace rdma_transport
