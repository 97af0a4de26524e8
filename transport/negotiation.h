// File: transport/negotiation.h
//
// What two sides agree on in the handshake, beyond the QP numbers: the
// protocol version, the path MTU, the RDMA READ depth in each direction, and
// the traffic class and service level. Pure functions of this side's Context
// and the peer's frame; the Listener and Connect() call them, and the result
// is what Connection::path() reports.
//
//   Path MTU      the smaller of both sides' active MTUs (each already capped
//                 by its MC_MTU); `notes` says so when they differ, since a
//                 silent mismatch is a known cause of stalls elsewhere.
//   READ depth    this side's QP issues at most min(its device's initiator
//                 depth, the peer's responder depth) READs at once
//                 (max_rd_atomic) and serves its own device's responder
//                 depth (max_dest_rd_atomic). A protocol-2 peer says nothing:
//                 the local figure is used, as before.
//   Traffic       TrafficPolicy on the server: each side its own MC_IB_TC /
//                 MC_IB_SL (the default), the server's imposed on the client
//                 (NCCL-style: one side chooses), or the client's adopted by
//                 the server (3FS-style). The client learns the outcome from
//                 ACCEPT; both report it.
//
//   ConnectionPath path = NegotiateAsClient(context, accept);
//   if (!path.notes.empty()) fprintf(stderr, "%s\n", path.notes.c_str());
//
// Stateless; thread-safe.

#ifndef RDMA_TRANSPORT_TRANSPORT_NEGOTIATION_H_
#define RDMA_TRANSPORT_TRANSPORT_NEGOTIATION_H_

#include <cstdint>
#include <optional>
#include <string>

#include "transport/context.h"
#include "transport/handshake.h"

namespace rdma_transport {

enum class TrafficPolicy {
  kEachSideOwn,         // each side's MC_IB_TC / MC_IB_SL (default)
  kServerImposes,       // the client's QP uses the server's settings
  kServerAdoptsClient,  // the server's QP uses the client's settings
};

// What one connection uses, as settled by its handshake.
struct ConnectionPath {
  uint16_t protocol_version = 0;
  int local_mtu = 0;  // this side's active MTU (capped by MC_MTU), bytes
  int peer_mtu = 0;   // the peer's
  int path_mtu = 0;   // the smaller: what the QP uses
  uint8_t max_rd_atomic = 1;             // RDMA READs this side issues at once
  uint8_t max_dest_rd_atomic = 1;        // RDMA READs this side serves at once
  std::optional<uint8_t> traffic_class;  // unset: the system default
  std::optional<uint8_t> service_level;
  // Both sides take rendezvous messages (ConnectionOptions::rendezvous and
  // the peer's MESSAGING extension): Send() accepts messages larger than
  // the peer's slot.
  bool rendezvous = false;
  // True when traffic_class/service_level came from the peer (a server that
  // imposes its own, or a server adopting the client's).
  bool traffic_from_peer = false;
  // Human-readable remarks: an MTU mismatch, an imposed traffic class.
  std::string notes;
};

// This side's READ depths, from its device (clamped to 1..16).
ReadDepth LocalReadDepth(const Context& context);
// This side's traffic class and service level (MC_IB_TC / MC_IB_SL).
TrafficSettings LocalTraffic(const Context& context);

// The server's path for a HELLO, and the TRAFFIC extension its ACCEPT
// carries (nothing under kEachSideOwn).
struct ServerNegotiation {
  ConnectionPath path;
  std::optional<TrafficSettings> accept_traffic;
};
ServerNegotiation NegotiateAsServer(const Context& context,
                                    const HandshakeMessage& hello,
                                    uint16_t protocol_version,
                                    TrafficPolicy policy);

// The client's path, from the server's ACCEPT.
ConnectionPath NegotiateAsClient(const Context& context,
                                 const HandshakeMessage& accept);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_NEGOTIATION_H_
