// File: transport/address_handle_probe.h
//
// Whether a local GID can address packets at all: creates an address handle
// from GID `index` of `port` to that same GID, and destroys it at once. This
// is UCX's test of a RoCE GID before it uses one: an entry the kernel cannot
// resolve a route from (its netdev lost the address, a stale or
// half-configured entry, a VLAN in another namespace) fails here, at
// start-up, with an errno, instead of later as a QP that never connects.
//
//   absl::Status usable = ProbeAddressHandle(verbs, pd, 1, gid.index, gid.gid);
//   if (AddressHandlesUnsupported(usable)) ...  // erdma: cannot tell
//   else if (!usable.ok()) ...                  // skip this GID
//
// Stateless, safe for concurrent use. Errors: the verbs error of
// ibv_create_ah (errno text), or of ibv_destroy_ah.

#ifndef RDMA_TRANSPORT_TRANSPORT_ADDRESS_HANDLE_PROBE_H_
#define RDMA_TRANSPORT_TRANSPORT_ADDRESS_HANDLE_PROBE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport {

absl::Status ProbeAddressHandle(Verbs& verbs, ibv_pd* pd, uint8_t port,
                                uint32_t index, const ibv_gid& gid);

// True for the provider's "no address handles here" (EOPNOTSUPP, ENOSYS):
// the probe says nothing about the GID then.
bool AddressHandlesUnsupported(const absl::Status& status);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_ADDRESS_HANDLE_PROBE_H_
