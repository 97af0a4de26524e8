#include "transport/negotiation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace rdma_transport {
namespace {

std::string Describe(const TrafficSettings& traffic) {
  return absl::StrCat(
      "traffic class ",
      traffic.traffic_class.has_value() ? absl::StrCat(*traffic.traffic_class)
                                        : std::string("default"),
      ", service level ",
      traffic.service_level.has_value() ? absl::StrCat(*traffic.service_level)
                                        : std::string("default"));
}

void AddNote(ConnectionPath& path, const std::string& note) {
  if (!path.notes.empty()) path.notes += "; ";
  path.notes += note;
}

// The MTU and READ-depth part both sides compute alike.
ConnectionPath CommonPath(const Context& context, const HandshakeMessage& peer,
                          uint16_t protocol_version) {
  ConnectionPath path;
  path.protocol_version = protocol_version;
  path.local_mtu = context.mtu();
  path.peer_mtu = peer.endpoint.mtu;
  path.path_mtu = std::min(path.local_mtu, path.peer_mtu);
  if (path.local_mtu != path.peer_mtu) {
    AddNote(path, absl::StrCat("path MTU ", path.path_mtu,
                               ": this side's active MTU is ", path.local_mtu,
                               ", the peer's ", path.peer_mtu));
  }
  const ReadDepth local = LocalReadDepth(context);
  path.max_rd_atomic = local.initiator;
  path.max_dest_rd_atomic = local.responder;
  if (peer.read_depth.has_value()) {
    path.max_rd_atomic = std::min(local.initiator, peer.read_depth->responder);
  }
  const TrafficSettings own = LocalTraffic(context);
  path.traffic_class = own.traffic_class;
  path.service_level = own.service_level;
  // This side's own wish is the connection's business (Establish).
  path.rendezvous = peer.messaging.has_value() && peer.messaging->rendezvous;
  return path;
}

}  // namespace

ReadDepth LocalReadDepth(const Context& context) {
  ReadDepth depth;
  depth.initiator = static_cast<uint8_t>(
      std::clamp(context.device_attr().max_qp_init_rd_atom, 1, 16));
  depth.responder = static_cast<uint8_t>(
      std::clamp(context.device_attr().max_qp_rd_atom, 1, 16));
  return depth;
}

TrafficSettings LocalTraffic(const Context& context) {
  TrafficSettings traffic;
  const TransportConfig& config = context.config();
  if (config.traffic_class.has_value()) {
    traffic.traffic_class = static_cast<uint8_t>(*config.traffic_class);
  }
  if (config.service_level.has_value()) {
    traffic.service_level = static_cast<uint8_t>(*config.service_level);
  }
  return traffic;
}

ServerNegotiation NegotiateAsServer(const Context& context,
                                    const HandshakeMessage& hello,
                                    uint16_t protocol_version,
                                    TrafficPolicy policy) {
  ServerNegotiation result;
  result.path = CommonPath(context, hello, protocol_version);
  if (protocol_version < kHandshakeVersion) return result;
  ConnectionPath& path = result.path;
  switch (policy) {
    case TrafficPolicy::kEachSideOwn:
      break;
    case TrafficPolicy::kServerImposes:
      result.accept_traffic = LocalTraffic(context);
      break;
    case TrafficPolicy::kServerAdoptsClient: {
      // A client that said nothing keeps the system default on both sides.
      const TrafficSettings client = hello.traffic.value_or(TrafficSettings{});
      path.traffic_class = client.traffic_class;
      path.service_level = client.service_level;
      path.traffic_from_peer = true;
      result.accept_traffic = client;
      AddNote(path, absl::StrCat("adopted the client's ", Describe(client)));
      break;
    }
  }
  return result;
}

ConnectionPath NegotiateAsClient(const Context& context,
                                 const HandshakeMessage& accept) {
  const uint16_t version = accept.version < kHandshakeVersion
                               ? kLegacyHandshakeVersion
                               : accept.max_version;
  ConnectionPath path = CommonPath(context, accept, version);
  if (accept.traffic.has_value()) {
    const TrafficSettings own = LocalTraffic(context);
    const TrafficSettings& used = *accept.traffic;
    path.traffic_class = used.traffic_class;
    path.service_level = used.service_level;
    if (used.traffic_class != own.traffic_class ||
        used.service_level != own.service_level) {
      path.traffic_from_peer = true;
      AddNote(path, absl::StrCat("the server set ", Describe(used),
                                 " (this side's own: ", Describe(own), ")"));
    }
  }
  return path;
}

}  // namespace rdma_transport
