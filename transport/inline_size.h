// File: transport/inline_size.h
//
// Inline small sends: negotiating max_inline_data per device, and deciding
// which sends go inline.
//
// A send posted with IBV_SEND_INLINE carries its payload in the work request
// itself: the NIC does not fetch it from host memory with a DMA read, which
// takes 0.4-0.9 us off one-way latency on ConnectX-6/7. Devices differ in how
// much they accept and verbs has no query for it, so, as in 3FS:
//
//  1. The first QP on a device asks for the vendor's known limit:
//       Mellanox/NVIDIA (0x02c9)       236  (fits a 256-byte BlueFlame write)
//       Intel irdma (0x8086)           48 gen1 (X722), 101 gen2 (E810/E82x),
//                                      216 later generations
//       Alibaba eRDMA (0x1ded)         96
//       anything else (rxe included)   236
//     or MC_MAX_INLINE when set.
//  2. While ibv_create_qp fails with EINVAL (and only EINVAL), ask again 16
//     bytes lower, down to 0 (no inline). Any other errno is returned at once.
//  3. The granted size is read back from cap.max_inline_data (mlx5 rounds the
//     request up); the usable size is that, but at most 236 on Mellanox.
//  4. The device remembers the size its last QP was created with, so later
//     QPs start there instead of stepping down again.
//
// A send goes inline exactly when its total length is <= the usable size.

#ifndef RDMA_TRANSPORT_TRANSPORT_INLINE_SIZE_H_
#define RDMA_TRANSPORT_TRANSPORT_INLINE_SIZE_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport {

inline constexpr uint32_t kVendorMellanox = 0x02c9;
inline constexpr uint32_t kVendorIntel = 0x8086;
inline constexpr uint32_t kVendorAlibaba = 0x1ded;
inline constexpr uint32_t kVendorSoftRoce = 0xFFFFFF;

// ConnectX BlueFlame writes at most 256 bytes: 16 of control segment and 4
// of inline header leave 236 of payload.
inline constexpr uint32_t kMellanoxMaxUsableInline = 236;
inline constexpr uint32_t kInlineStepDown = 16;

// The first max_inline_data to ask for on a device nobody has asked yet.
uint32_t VendorInlineRequest(uint32_t vendor_id, uint32_t vendor_part_id);

// How many payload bytes may go inline on a QP that asked for `requested`
// and was granted `granted`. Asking 0 means no inline, whatever a provider
// grants anyway (rxe grants 16 for 0).
uint32_t UsableInlineSize(uint32_t vendor_id, uint32_t requested,
                          uint32_t granted);

// Per device: the max_inline_data the last QP was created with. Safe for
// concurrent use; lock-free.
class InlineSizeCache {
 public:
  std::optional<uint32_t> Get() const;
  void Set(uint32_t size);

 private:
  std::atomic<int64_t> size_{-1};
};

// The device a QP is created on, as the negotiation needs it.
struct InlineDevice {
  std::string name;  // for error messages
  uint32_t vendor_id = 0;
  uint32_t vendor_part_id = 0;
  InlineSizeCache* cache = nullptr;  // not owned; required
};

struct NegotiatedQp {
  ibv_qp* qp = nullptr;  // owned by the caller (Verbs::DestroyQp)
  uint32_t requested_inline = 0;
  uint32_t granted_inline = 0;
  uint32_t usable_inline = 0;
  // Every max_inline_data asked for, in order (the last one succeeded).
  std::vector<uint32_t> attempts;
};

// Creates a QP with `init_attr` (its cap.max_inline_data is ignored),
// negotiating max_inline_data as described above. `configured` is
// TransportConfig::max_inline (nullopt: by vendor). Errors: the errno of the
// first non-EINVAL failure (VerbsErrno() gives it), or EINVAL when even 0 is
// refused; the message names the device and the sizes tried.
absl::StatusOr<NegotiatedQp> CreateQpNegotiatingInline(
    Verbs& verbs, ibv_pd* pd, const ibv_qp_init_attr& init_attr,
    const InlineDevice& device, std::optional<uint32_t> configured);

// True when a send of `total_length` bytes should carry IBV_SEND_INLINE.
inline bool ShouldSendInline(uint32_t total_length, uint32_t usable_inline) {
  return usable_inline > 0 && total_length <= usable_inline;
}

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_INLINE_SIZE_H_
