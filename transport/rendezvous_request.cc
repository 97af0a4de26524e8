// File: transport/rendezvous_request.cc
//
// Checking a received rendezvous request (rendezvous_request.h).

#include "transport/rendezvous_request.h"

#include "absl/strings/str_cat.h"

namespace rdma_transport {

absl::StatusOr<RemoteRegion> DecodeRendezvousRequest(
    std::span<const std::byte> bytes) {
  if (bytes.size() != kRendezvousRequestBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous request of ", bytes.size(),
                     " bytes; it must be ", kRendezvousRequestBytes));
  }
  const RemoteRegion request =
      RemoteRegion::Decode(bytes.first<kRendezvousRequestBytes>());
  if (request.length == 0 || request.length > kMaxRendezvousBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous request: length ", request.length,
                     " out of range 1..", kMaxRendezvousBytes));
  }
  if (request.address + request.length < request.address) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous request: address 0x", absl::Hex(request.address),
        " + length ", request.length, " wraps around"));
  }
  return request;
}

}  // namespace rdma_transport
