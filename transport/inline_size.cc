#include "transport/inline_size.h"

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

// Intel irdma generation 1 is the X722 (i40iw) family; its PCI device ids,
// which the kernel reports as vendor_part_id (rdma-core
// providers/irdma/i40e_devids.h).
bool IsIntelGen1(uint32_t vendor_part_id) {
  switch (vendor_part_id) {
    case 0x374C:
    case 0x374D:
    case 0x37CD:
    case 0x37CE:
    case 0x37CF:
    case 0x37D0:
    case 0x37D1:
    case 0x37D2:
    case 0x37D3:
    case 0x37D9:
      return true;
    default:
      return false;
  }
}

// Generation 2: E810 and the E82x family (providers/irdma/ice_devids.h).
bool IsIntelGen2(uint32_t vendor_part_id) {
  switch (vendor_part_id) {
    case 0x1591:  // E810-C backplane
    case 0x1592:  // E810-C QSFP
    case 0x1593:  // E810-C SFP
    case 0x1599:  // E810-XXV backplane
    case 0x159A:  // E810-XXV QSFP
    case 0x159B:  // E810-XXV SFP
    case 0x124C:  // E823-L
    case 0x124D:
    case 0x124E:
    case 0x124F:
    case 0x151D:
    case 0x188A:  // E823-C
    case 0x188B:
    case 0x188C:
    case 0x188D:
    case 0x188E:
    case 0x1890:  // C822N
    case 0x1891:
    case 0x1892:
    case 0x1893:  // E822-C
    case 0x1894:
    case 0x1897:  // E822-L
    case 0x1898:
    case 0x1899:
    case 0x189A:
      return true;
    default:
      return false;
  }
}

}  // namespace

uint32_t VendorInlineRequest(uint32_t vendor_id, uint32_t vendor_part_id) {
  switch (vendor_id) {
    case kVendorMellanox:
      return kMellanoxMaxUsableInline;
    case kVendorIntel:
      if (IsIntelGen1(vendor_part_id)) return 48;
      if (IsIntelGen2(vendor_part_id)) return 101;
      return 216;
    case kVendorAlibaba:
      return 96;
    default:
      return 236;
  }
}

uint32_t UsableInlineSize(uint32_t vendor_id, uint32_t requested,
                          uint32_t granted) {
  if (requested == 0) return 0;
  if (vendor_id == kVendorMellanox) {
    return std::min(granted, kMellanoxMaxUsableInline);
  }
  return granted;
}

std::optional<uint32_t> InlineSizeCache::Get() const {
  int64_t size = size_.load(std::memory_order_acquire);
  if (size < 0) return std::nullopt;
  return static_cast<uint32_t>(size);
}

void InlineSizeCache::Set(uint32_t size) {
  size_.store(size, std::memory_order_release);
}

absl::StatusOr<NegotiatedQp> CreateQpNegotiatingInline(
    Verbs& verbs, ibv_pd* pd, const ibv_qp_init_attr& init_attr,
    const InlineDevice& device, std::optional<uint32_t> configured) {
  NegotiatedQp result;
  uint32_t request;
  if (configured == 0u) {
    request = 0;  // inline disabled: no negotiation, no cache
  } else if (std::optional<uint32_t> cached = device.cache->Get()) {
    request = *cached;
  } else if (configured.has_value()) {
    request = *configured;
  } else {
    request = VendorInlineRequest(device.vendor_id, device.vendor_part_id);
  }

  while (true) {
    ibv_qp_init_attr attr = init_attr;
    attr.cap.max_inline_data = request;
    result.attempts.push_back(request);
    absl::StatusOr<ibv_qp*> qp = verbs.CreateQp(pd, &attr);
    if (qp.ok()) {
      result.qp = *qp;
      result.requested_inline = request;
      result.granted_inline = attr.cap.max_inline_data;
      result.usable_inline =
          UsableInlineSize(device.vendor_id, request, attr.cap.max_inline_data);
      if (configured != 0u) device.cache->Set(request);
      return result;
    }
    const int error = VerbsErrno(qp.status());
    if (error != EINVAL || request == 0) {
      std::string context = absl::StrCat(
          "creating an RC QP on ", device.name,
          " (max_inline_data tried: ", absl::StrJoin(result.attempts, ", "),
          "; max_send_wr=", init_attr.cap.max_send_wr,
          ", max_recv_wr=", init_attr.cap.max_recv_wr,
          ", max_send_sge=", init_attr.cap.max_send_sge, ")");
      return WithContext(qp.status(), context);
    }
    request = request > kInlineStepDown ? request - kInlineStepDown : 0;
  }
}

}  // namespace rdma_transport
