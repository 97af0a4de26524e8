#include "sim/device_profile.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport::sim {
namespace {

// libmlx5's send WQE layout for an RC QP (providers/mlx5/qp.c,
// sq_overhead() and mlx5_calc_send_wqe()): a fixed overhead of 192 bytes
// (control segment plus room for the largest of the remote-address, atomic and
// memory-window-bind segments), then either the data segments (16 bytes each)
// or one inline segment (a 4-byte header and the data, padded to 16 bytes),
// the whole rounded up to 64-byte basic blocks.
constexpr uint32_t kMlx5SqOverheadBytes = 192;
constexpr uint32_t kMlx5DataSegmentBytes = 16;
constexpr uint32_t kMlx5InlineHeaderBytes = 4;
constexpr uint32_t kMlx5SendWqeBasicBlockBytes = 64;
// A receive WQE is the data segments, rounded up to a power of two; the
// receive queue is at least one basic block.
constexpr uint32_t kMlx5MinReceiveQueueBytes = 64;

// rxe: each scatter/gather entry of a send WQE is 16 bytes (struct ib_sge),
// and that space holds inline data too.
constexpr uint32_t kRxeSgeBytes = 16;

uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

uint64_t RoundUpToPowerOfTwo(uint64_t value) {
  uint64_t result = 1;
  while (result < value) result <<= 1;
  return result;
}

absl::Status Refuse(std::string detail) {
  return VerbsError("ibv_create_qp", EINVAL, detail);
}

// libmlx5's mlx5_calc_send_wqe() / mlx5_calc_sq_size() / mlx5_calc_rq_size().
absl::StatusOr<ibv_qp_cap> GrantMlx5(const DeviceProfile& profile,
                                     const ibv_qp_cap& requested) {
  ibv_qp_cap granted = requested;
  const uint64_t max_wqe = profile.mlx5_max_send_wqe_bytes;
  const uint64_t max_gather =
      (max_wqe - kMlx5SqOverheadBytes) / kMlx5DataSegmentBytes;
  if (requested.max_send_sge > max_gather) {
    return Refuse(absl::StrCat("max_send_sge ", requested.max_send_sge,
                               " does not fit a ", max_wqe, "-byte WQE"));
  }
  const uint64_t gather_size =
      kMlx5SqOverheadBytes +
      uint64_t{requested.max_send_sge} * kMlx5DataSegmentBytes;
  uint64_t inline_size = 0;
  if (requested.max_inline_data > 0) {
    inline_size =
        kMlx5SqOverheadBytes +
        AlignUp(kMlx5InlineHeaderBytes + uint64_t{requested.max_inline_data},
                16);
  }
  const uint64_t wqe_bytes = std::max(gather_size, inline_size);
  if (wqe_bytes > max_wqe) {
    return Refuse(absl::StrCat("max_inline_data ", requested.max_inline_data,
                               " needs a ", wqe_bytes, "-byte WQE, above ",
                               max_wqe));
  }
  const uint64_t wqe_size = AlignUp(wqe_bytes, kMlx5SendWqeBasicBlockBytes);
  const uint64_t overhead = kMlx5SqOverheadBytes + kMlx5InlineHeaderBytes;
  granted.max_inline_data =
      wqe_size > overhead ? static_cast<uint32_t>(wqe_size - overhead) : 0;

  if (requested.max_send_wr > 0) {
    const uint64_t queue_bytes =
        RoundUpToPowerOfTwo(uint64_t{requested.max_send_wr} * wqe_size);
    const uint64_t basic_blocks = queue_bytes / kMlx5SendWqeBasicBlockBytes;
    if (basic_blocks > static_cast<uint64_t>(profile.max_qp_wr)) {
      return Refuse(absl::StrCat("max_send_wr ", requested.max_send_wr, " of ",
                                 wqe_size, "-byte WQEs needs ", basic_blocks,
                                 " basic blocks, above ", profile.max_qp_wr));
    }
    granted.max_send_wr = static_cast<uint32_t>(queue_bytes / wqe_size);
  }
  if (requested.max_recv_wr > 0) {
    const uint64_t receive_wqe_size = RoundUpToPowerOfTwo(
        uint64_t{std::max<uint32_t>(requested.max_recv_sge, 1)} *
        kMlx5DataSegmentBytes);
    const uint64_t queue_bytes =
        std::max(RoundUpToPowerOfTwo(requested.max_recv_wr) * receive_wqe_size,
                 uint64_t{kMlx5MinReceiveQueueBytes});
    const uint64_t depth = queue_bytes / receive_wqe_size;
    if (depth > static_cast<uint64_t>(profile.max_qp_wr)) {
      return Refuse(absl::StrCat("max_recv_wr ", requested.max_recv_wr,
                                 " rounds up to ", depth, ", above ",
                                 profile.max_qp_wr));
    }
    granted.max_recv_wr = static_cast<uint32_t>(depth);
  }
  return granted;
}

}  // namespace

absl::StatusOr<ibv_qp_cap> GrantQpCaps(const DeviceProfile& profile,
                                       const ibv_qp_cap& requested) {
  const auto max_wr = static_cast<uint32_t>(profile.max_qp_wr);
  const auto max_sge = static_cast<uint32_t>(profile.max_sge);
  if (requested.max_send_wr > max_wr || requested.max_recv_wr > max_wr) {
    return Refuse(absl::StrCat("max_send_wr ", requested.max_send_wr,
                               " / max_recv_wr ", requested.max_recv_wr,
                               " above max_qp_wr ", max_wr));
  }
  if (requested.max_send_sge > max_sge || requested.max_recv_sge > max_sge) {
    return Refuse(absl::StrCat("max_send_sge ", requested.max_send_sge,
                               " / max_recv_sge ", requested.max_recv_sge,
                               " above max_sge ", max_sge));
  }
  switch (profile.inline_rule) {
    case InlineRule::kMlx5:
      return GrantMlx5(profile, requested);
    case InlineRule::kFixedLimit: {
      if (requested.max_inline_data > profile.max_inline_data) {
        return Refuse(absl::StrCat("max_inline_data ",
                                   requested.max_inline_data, " above ",
                                   profile.max_inline_data));
      }
      return requested;
    }
    case InlineRule::kRxe: {
      if (requested.max_inline_data > profile.max_inline_data) {
        return Refuse(absl::StrCat("max_inline_data ",
                                   requested.max_inline_data, " above ",
                                   profile.max_inline_data));
      }
      ibv_qp_cap granted = requested;
      const uint32_t wqe_space = std::max(requested.max_send_sge * kRxeSgeBytes,
                                          requested.max_inline_data);
      granted.max_inline_data = wqe_space;
      granted.max_send_sge = wqe_space / kRxeSgeBytes;
      return granted;
    }
  }
  return Refuse("unknown inline rule");
}

absl::StatusOr<int> GrantCqDepth(const DeviceProfile& profile, int cqe) {
  if (cqe < 1 || cqe > profile.max_cqe) {
    return VerbsError(
        "ibv_create_cq", EINVAL,
        absl::StrCat("cqe ", cqe, " outside 1..", profile.max_cqe));
  }
  if (!profile.power_of_two_queue_depths) return cqe;
  // libmlx5: the CQ holds a power of two entries, one of them kept free.
  return static_cast<int>(
      RoundUpToPowerOfTwo(uint64_t{static_cast<uint32_t>(cqe)} + 1) - 1);
}

// --- Stock profiles ---

DeviceProfile ConnectX6() {
  DeviceProfile profile;
  profile.model = "ConnectX-6";
  profile.name_prefix = "sim_cx6";
  profile.vendor_id = 0x02c9;
  profile.vendor_part_id = 4123;
  profile.hw_ver = 0;
  profile.fw_version = "20.31.1014";
  profile.max_mr_size = ~uint64_t{0};
  profile.page_size_cap = 0xfffffffffffff000;
  profile.max_qp = 262144;
  profile.max_qp_wr = 32768;
  profile.max_sge = 30;
  profile.max_sge_rd = 30;
  profile.max_cq = 16777216;
  profile.max_cqe = 4194303;
  profile.max_mr = 16777216;
  profile.max_pd = 16777216;
  profile.max_qp_rd_atom = 16;
  profile.max_qp_init_rd_atom = 16;
  profile.max_pkeys = 128;
  profile.num_comp_vectors = 8;
  profile.device_cap_flags =
      IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR |
      IBV_DEVICE_AUTO_PATH_MIG | IBV_DEVICE_CHANGE_PHY_PORT |
      IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID |
      IBV_DEVICE_RC_RNR_NAK_GEN;
  // mlx5_ib: type 2B windows when the firmware has imaicl, as ConnectX-4 on.
  profile.device_cap_flags |=
      IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  profile.max_mw = 16777216;
  // ibv_devinfo -v of a ConnectX-6.
  profile.max_srq = 8388608;
  profile.max_srq_wr = 32767;
  profile.max_srq_sge = 31;
  profile.link_layer = IBV_LINK_LAYER_ETHERNET;
  profile.max_mtu = IBV_MTU_4096;
  profile.active_mtu = IBV_MTU_4096;
  profile.gid_table_length = 256;
  profile.max_msg_size = 1u << 30;
  profile.active_width = 2;   // 4x
  profile.active_speed = 64;  // HDR lanes: 200 Gb/s
  profile.link_local_gid_type = IBV_GID_TYPE_ROCE_V1;
  profile.has_traffic_class_file = true;  // MLNX_OFED's mlx5_ib
  profile.inline_rule = InlineRule::kMlx5;
  profile.mlx5_max_send_wqe_bytes = 1024;
  profile.power_of_two_queue_depths = true;
  profile.post_limit_errno = ENOMEM;
  return profile;
}

DeviceProfile ConnectX7() {
  DeviceProfile profile = ConnectX6();
  profile.model = "ConnectX-7";
  profile.name_prefix = "sim_cx7";
  profile.vendor_part_id = 4129;
  profile.fw_version = "28.39.1002";
  profile.max_qp = 131072;
  profile.active_speed = 128;  // NDR lanes: 400 Gb/s
  return profile;
}

DeviceProfile ConnectX7Infiniband() {
  DeviceProfile profile = ConnectX7();
  profile.model = "ConnectX-7 (InfiniBand)";
  profile.name_prefix = "sim_cx7ib";
  profile.link_layer = IBV_LINK_LAYER_INFINIBAND;
  profile.gid_table_length = 128;
  profile.link_local_gid_type = IBV_GID_TYPE_IB;
  return profile;
}

DeviceProfile IntelE810() {
  DeviceProfile profile;
  profile.model = "Intel E810 (irdma gen2)";
  profile.name_prefix = "sim_e810";
  profile.vendor_id = 0x8086;
  profile.vendor_part_id = 0x1593;
  profile.hw_ver = 2;
  profile.fw_version = "1.57";
  profile.max_mr_size = 0x200000000000;
  profile.page_size_cap = 0x40201000;
  profile.max_qp = 32768;
  profile.max_qp_wr = 4063;
  profile.max_sge = 13;
  profile.max_sge_rd = 13;
  profile.max_cq = 65536;
  profile.max_cqe = 1048574;
  profile.max_mr = 2097150;
  profile.max_pd = 262144;
  profile.max_qp_rd_atom = 127;
  profile.max_qp_init_rd_atom = 127;
  profile.max_pkeys = 1;
  profile.num_comp_vectors = 8;
  profile.device_cap_flags =
      IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_RC_RNR_NAK_GEN;
  // libirdma implements type 2 binds (providers/irdma/uverbs.c); the kernel
  // flags and max_mw of a real E810/X722 are not verified (plausible).
  profile.device_cap_flags |=
      IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  profile.max_mw = profile.max_mr;
  profile.link_layer = IBV_LINK_LAYER_ETHERNET;
  profile.max_mtu = IBV_MTU_4096;
  profile.active_mtu = IBV_MTU_4096;
  profile.gid_table_length = 32;
  profile.max_msg_size = 0x7fffffff;
  profile.active_width = 2;   // 4x
  profile.active_speed = 32;  // EDR lanes: 100 Gb/s
  profile.link_local_gid_type = IBV_GID_TYPE_ROCE_V2;
  profile.inline_rule = InlineRule::kFixedLimit;
  profile.max_inline_data = 101;
  profile.post_limit_errno = EINVAL;
  return profile;
}

DeviceProfile IntelX722() {
  DeviceProfile profile = IntelE810();
  profile.model = "Intel X722 (irdma gen1)";
  profile.name_prefix = "sim_x722";
  profile.vendor_part_id = 0x37D0;
  profile.hw_ver = 1;
  profile.fw_version = "4.11";
  profile.max_qp = 16384;
  profile.max_qp_wr = 2047;
  profile.max_sge = 4;
  profile.max_sge_rd = 1;
  profile.max_qp_rd_atom = 63;
  profile.max_qp_init_rd_atom = 63;
  profile.active_mtu = IBV_MTU_1024;
  profile.active_width = 1;  // 1x
  profile.active_speed = 8;  // 10 Gb/s
  profile.max_inline_data = 48;
  return profile;
}

DeviceProfile AlibabaErdma() {
  DeviceProfile profile;
  profile.model = "Alibaba eRDMA";
  profile.name_prefix = "sim_erdma";
  profile.vendor_id = 0x1ded;
  profile.vendor_part_id = 0x107f;
  profile.hw_ver = 0;
  profile.fw_version = "0.2.0";
  profile.max_mr_size = 0xffffffff;
  profile.page_size_cap = 0xfffff000;
  profile.max_qp = 4096;
  profile.max_qp_wr = 8192;
  profile.max_sge = 6;
  profile.max_sge_rd = 1;
  profile.max_cq = 8192;
  profile.max_cqe = 4194304;
  profile.max_mr = 65536;
  profile.max_pd = 65536;
  profile.max_qp_rd_atom = 128;
  profile.max_qp_init_rd_atom = 128;
  profile.max_pkeys = 1;
  profile.num_comp_vectors = 4;
  profile.device_cap_flags = IBV_DEVICE_PORT_ACTIVE_EVENT;
  profile.supports_address_handles = false;  // no UD, no AHs
  profile.link_layer = IBV_LINK_LAYER_ETHERNET;
  profile.max_mtu = IBV_MTU_4096;
  profile.active_mtu = IBV_MTU_1024;
  profile.gid_table_length = 2;
  profile.max_msg_size = 0x7fffffff;
  profile.active_width = 1;
  profile.active_speed = 32;
  profile.link_local_gid_type = IBV_GID_TYPE_ROCE_V2;
  profile.inline_rule = InlineRule::kFixedLimit;
  profile.max_inline_data = 96;
  profile.post_limit_errno = EINVAL;
  return profile;
}

DeviceProfile SoftRoce() {
  DeviceProfile profile;
  profile.model = "Soft-RoCE (rxe)";
  profile.name_prefix = "sim_rxe";
  profile.vendor_id = 0xFFFFFF;
  profile.vendor_part_id = 0;
  profile.hw_ver = 0;
  profile.fw_version = "";
  profile.max_mr_size = ~uint64_t{0};
  profile.page_size_cap = 0xfffff000;
  profile.max_qp = 65536;
  profile.max_qp_wr = 16384;
  profile.max_sge = 32;
  profile.max_sge_rd = 32;
  profile.max_cq = 16384;
  profile.max_cqe = 32767;
  profile.max_mr = 262144;
  profile.max_pd = 32764;
  profile.max_qp_rd_atom = 128;
  profile.max_qp_init_rd_atom = 128;
  profile.max_pkeys = 64;
  profile.num_comp_vectors = 1;
  profile.device_cap_flags =
      IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_PORT_ACTIVE_EVENT |
      IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_RC_RNR_NAK_GEN;
  // rxe_param.h: IB_DEVICE_MEM_WINDOW | IB_DEVICE_MEM_WINDOW_TYPE_2B,
  // RXE_MAX_MW 0x40000. (eRDMA's provider has no alloc_mw: max_mw 0.)
  profile.device_cap_flags |=
      IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  profile.max_mw = 0x40000;
  // rxe has SRQs (rxe_srq.c); the limits are plausible, not verified against
  // rxe_param.h. irdma (E810/X722, before GEN3) and eRDMA have none:
  // max_srq 0 there.
  profile.max_srq = 0x40000;
  profile.max_srq_wr = 16384;
  profile.max_srq_sge = 27;
  profile.link_layer = IBV_LINK_LAYER_ETHERNET;
  profile.max_mtu = IBV_MTU_4096;
  profile.active_mtu = IBV_MTU_1024;
  profile.gid_table_length = 1024;
  profile.max_msg_size = 0x800000;
  profile.active_width = 1;
  profile.active_speed = 1;
  profile.link_local_gid_type = IBV_GID_TYPE_ROCE_V1;
  profile.inline_rule = InlineRule::kRxe;
  profile.max_inline_data = 512;
  profile.post_limit_errno = EINVAL;
  return profile;
}

}  // namespace rdma_transport::sim
