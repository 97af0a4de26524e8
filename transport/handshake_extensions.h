// File: transport/handshake_extensions.h
//
// The extension codec of format-3 handshake frames (handshake.h): typed,
// length-prefixed values in ascending type order after a frame's fixed
// fields. Known types (READ_DEPTH, TRAFFIC, RETRY_AFTER) are checked for
// length, place and range; an unknown one is kept as it was, unless its
// critical bit is set, which fails decoding. Internal to
// //transport:handshake; handshake.cc is the frame codec that calls it.

#ifndef RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_EXTENSIONS_H_
#define RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_EXTENSIONS_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "transport/handshake.h"
#include "transport/handshake_wire.h"

namespace rdma_transport {
namespace handshake_internal {

// True when `message` has any extension, known or not.
bool HasExtensions(const HandshakeMessage& message);

// The checks encoding makes of a format-3 message's extensions: each known
// one where it belongs and in range; unknown ones not of a known type, in
// ascending order, at most 65535 bytes each.
absl::Status CheckExtensions(const HandshakeMessage& message);

// Decodes the extensions that end a format-3 body of `type` into `message`.
absl::Status DecodeExtensions(HandshakeType type,
                              std::span<const uint8_t> bytes,
                              HandshakeMessage& message);

// Writes every extension of `message` in ascending type order.
void WriteExtensions(const HandshakeMessage& message, Writer& writer);

}  // namespace handshake_internal
}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_EXTENSIONS_H_
