// File: transport/rendezvous_request.h
//
// The payload of a rendezvous request: the message a sender posts instead of
// a message too large for the peer's receive slot (connection.h,
// "Rendezvous"). It names registered memory of the sender's that the
// receiver reads with RDMA READ into memory it provides, then reports read
// (the "finished" count of an immediate, immediate_data.h), after which the
// sender may reuse the memory.
//
// The payload is the memory's RemoteRegion in its 20-byte encoding
// (memory_region.h: address, length, rkey, big-endian), carried by a
// SEND_WITH_IMM of immediate kind 3. Requests are read in the order they
// were sent; nothing names one, as the finished counts complete them in that
// order.
//
//   std::array<std::byte, kRendezvousRequestBytes> wire;
//   RemoteRegion{address, length, rkey}.Encode(wire);
//   absl::StatusOr<RemoteRegion> message = DecodeRendezvousRequest(received);
//
// DecodeRendezvousRequest checks what a hostile or broken peer could get
// wrong (the size, the length's range, an address range that wraps) and
// names it in a kInvalidArgument error.

#ifndef RDMA_TRANSPORT_TRANSPORT_RENDEZVOUS_REQUEST_H_
#define RDMA_TRANSPORT_TRANSPORT_RENDEZVOUS_REQUEST_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "transport/memory_region.h"

namespace rdma_transport {

inline constexpr size_t kRendezvousRequestBytes = RemoteRegion::kEncodedSize;
// The largest message one request may carry (1 TiB): a length beyond any
// memory a peer could have registered is a broken peer.
inline constexpr uint64_t kMaxRendezvousBytes = uint64_t{1} << 40;

absl::StatusOr<RemoteRegion> DecodeRendezvousRequest(
    std::span<const std::byte> bytes);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_RENDEZVOUS_REQUEST_H_
