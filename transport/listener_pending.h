// File: transport/listener_pending.h
//
// `Listener::Pending`: one socket the Listener holds, silent or with a
// handshake under way - its deadline, the frame being read, and the
// connection (or pooled shell) it will become. Shared by the admission
// tables (listener.cc) and the server side of the handshake
// (listener_handshake.cc). Internal to //transport:transport.

#ifndef RDMA_TRANSPORT_TRANSPORT_LISTENER_PENDING_H_
#define RDMA_TRANSPORT_TRANSPORT_LISTENER_PENDING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/connection.h"
#include "transport/deadline.h"
#include "transport/handshake.h"
#include "transport/listener.h"
#include "transport/negotiation.h"
#include "transport/tcp.h"

namespace rdma_transport {

// One handshake in progress on the server side.
struct Listener::Pending {
  Socket socket;
  std::string peer;
  std::string source;  // the peer's address without its port
  Deadline deadline;
  bool awaiting_ready = false;
  // The frame format this peer speaks (known from its first header; REJECTs
  // before that go in format 2, which every peer reads).
  uint16_t format = kLegacyHandshakeVersion;
  std::vector<uint8_t> bytes;
  size_t needed = kHandshakeHeaderSize;
  std::unique_ptr<Connection> connection;
  // Protocol 3: the connection is a shell (QP in RESET, nothing registered)
  // that can serve another peer if this one never sends READY.
  bool recyclable = false;
  HandshakeMessage hello;  // protocol 3: kept until READY
  ConnectionPath path;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_LISTENER_PENDING_H_
