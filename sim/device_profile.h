// File: sim/device_profile.h
//
// `DeviceProfile` describes one model of RDMA NIC as plain data: identity
// (vendor, part, firmware), the limits ibv_query_device and ibv_query_port
// report, and the rules the vendor's provider applies when it sizes a QP or a
// CQ (how it grants max_inline_data, whether it rounds queue depths up, which
// errno a post beyond the QP's limits fails with). The simulator reads nothing
// else, so adding a NIC model is adding a function that fills one in:
//
//   DeviceProfile MyNic() {
//     DeviceProfile profile = ConnectX6();
//     profile.model = "My NIC";
//     profile.name_prefix = "sim_mynic";
//     profile.max_inline_data = 64;
//     profile.inline_rule = InlineRule::kFixedLimit;
//     return profile;
//   }
//
// `GrantQpCaps()` and `GrantCqDepth()` apply a profile's rules to a request
// exactly as CreateQp/CreateCq do, so tests can check a profile without a
// fabric. The figures in the stock profiles are the providers' documented or
// observed values; where a figure was not known it is a plausible one and is
// marked so in docs/simulator.md.
//
// Plain data and pure functions: thread-compatible, no ownership.

#ifndef RDMA_TRANSPORT_SIM_DEVICE_PROFILE_H_
#define RDMA_TRANSPORT_SIM_DEVICE_PROFILE_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rdma_transport::sim {

// How a provider turns the max_inline_data a QP asks for into the one it
// grants (and writes back into ibv_qp_init_attr::cap).
enum class InlineRule {
  // libmlx5 (ConnectX): the send WQE is sized to hold the request and rounded
  // up to 64-byte blocks; the grant is whatever fits in that WQE, so it can
  // exceed the request. Refused with EINVAL when the WQE would exceed
  // `mlx5_max_send_wqe_bytes`. See GrantQpCaps().
  kMlx5,
  // irdma, erdma: the request is granted as asked when it is at most
  // `max_inline_data` and refused with EINVAL above; nothing larger is
  // written back.
  kFixedLimit,
  // rxe (Soft-RoCE): the grant is max(request, 16 * max_send_sge) (the send
  // WQE's scatter/gather space doubles as inline space), EINVAL above
  // `max_inline_data` (512); max_send_sge is written back as grant / 16.
  kRxe,
};

// One filled slot of an explicit GID table (DeviceProfile::gid_layout).
struct GidSlot {
  uint32_t index = 0;
  // The GID in IPv6 text form ("2001:db8::5", "::ffff:10.1.0.5",
  // "fe80::1"), or one of the two placeholders below, resolved per device
  // when it is added.
  std::string gid;
  ibv_gid_type type = IBV_GID_TYPE_ROCE_V2;
  // The errno ibv_create_ah fails with for an address handle sourced from
  // this slot; 0: it works. Models an entry the kernel cannot route from,
  // e.g. a GID left behind when its netdev lost the address (ENETUNREACH).
  int create_ah_errno = 0;
};
// ::ffff:<the device's IPv4 address> (AddDevice's `ipv4` or 10.0.0.<k>).
inline constexpr char kDeviceIpv4Gid[] = "device-ipv4";
// The device's link-local fe80:: GID (from its made-up MAC).
inline constexpr char kLinkLocalGid[] = "link-local";

struct DeviceProfile {
  // --- Identity ---
  std::string model;        // "ConnectX-6", for messages and docs.
  std::string name_prefix;  // Device names are "<prefix>_<n>": "sim_cx6_0".
  uint32_t vendor_id = 0;
  uint32_t vendor_part_id = 0;
  uint32_t hw_ver = 0;
  std::string fw_version;

  // --- Device limits (ibv_device_attr) ---
  uint64_t max_mr_size = 0;
  uint64_t page_size_cap = 0;
  int max_qp = 0;
  int max_qp_wr = 0;
  int max_sge = 0;
  int max_sge_rd = 0;
  int max_cq = 0;
  int max_cqe = 0;
  int max_mr = 0;
  // Type 2 memory windows: 0 where the provider has none (AllocMw then fails
  // with EOPNOTSUPP, as ibv_alloc_mw without a provider op does). A profile
  // with windows also says so in device_cap_flags (IBV_DEVICE_MEM_WINDOW,
  // IBV_DEVICE_MEM_WINDOW_TYPE_2B), which is what the transport checks.
  int max_mw = 0;
  // Shared receive queues: max_srq 0 where the provider has none
  // (CreateSrq then fails with EOPNOTSUPP).
  int max_srq = 0;
  int max_srq_wr = 0;
  int max_srq_sge = 0;
  int max_pd = 0;
  int max_qp_rd_atom = 0;
  int max_qp_init_rd_atom = 0;
  uint16_t max_pkeys = 1;
  int num_comp_vectors = 1;
  unsigned int device_cap_flags = 0;

  // --- Port 1 (ibv_port_attr); every simulated device has one port ---
  uint8_t link_layer = IBV_LINK_LAYER_ETHERNET;
  ibv_mtu max_mtu = IBV_MTU_4096;
  ibv_mtu active_mtu = IBV_MTU_1024;
  int gid_table_length = 16;
  uint32_t max_msg_size = 1u << 31;
  uint8_t active_width = 2;  // 4x
  uint8_t active_speed = 7;  // EDR-class lane speed code
  // Type of GID index 0 (the link-local fe80:: entry) on an Ethernet port.
  // Index 1 is always the IPv4-mapped RoCE v2 entry.
  ibv_gid_type link_local_gid_type = IBV_GID_TYPE_ROCE_V2;
  // Ethernet only. Empty: the table above (index 0 link-local, index 1 the
  // device's IPv4). Otherwise exactly these slots are filled, at any index
  // below gid_table_length, so a table can start with IPv6 and link-local
  // entries and hold its first IPv4 entry anywhere. AddDevice refuses a
  // layout with an index out of range or twice, an unparsable or all-zero
  // GID (kInvalidArgument) or a GID another device holds (kAlreadyExists).
  std::vector<GidSlot> gid_layout;

  // --- Address handles ---
  // false: the provider has no address handles (erdma), CreateAh fails
  // with EOPNOTSUPP.
  bool supports_address_handles = true;

  // --- The host's traffic-class override (mlx5 with MLNX_OFED) ---
  // Whether /sys/class/infiniband/<dev>/tc/1/traffic_class exists.
  bool has_traffic_class_file = false;
  // A value written to that file ("echo 106 > .../traffic_class"): the file
  // then reads "Global tclass=106\n" and every packet the device sends
  // carries this traffic class, whatever the QP's ah_attr.grh.traffic_class
  // (which QueryQp still reports). nullopt: the file is empty, no override.
  // Setting it implies has_traffic_class_file.
  std::optional<uint8_t> traffic_class_override;

  // --- Provider rules for sizing queues and for posting ---
  InlineRule inline_rule = InlineRule::kFixedLimit;
  // kFixedLimit and kRxe: the largest max_inline_data granted.
  uint32_t max_inline_data = 0;
  // kMlx5: the largest send WQE (max_sq_desc_sz), in bytes.
  uint32_t mlx5_max_send_wqe_bytes = 1024;
  // libmlx5 rounds QP and CQ depths up to powers of two and writes the larger
  // values back; other providers grant depths exactly.
  bool power_of_two_queue_depths = false;
  // The errno of a post whose inline payload or scatter/gather count exceeds
  // the QP's grant: libmlx5 says ENOMEM, the others EINVAL. (A full queue is
  // ENOMEM everywhere.)
  int post_limit_errno = EINVAL;
};

// --- Stock profiles ---

// NVIDIA ConnectX-6 (mlx5), RoCE: vendor 0x02c9, part 4123.
DeviceProfile ConnectX6();
// NVIDIA ConnectX-7 (mlx5), RoCE: vendor 0x02c9, part 4129.
DeviceProfile ConnectX7();
// ConnectX-7 with an InfiniBand port: LIDs, IB GIDs, routing by DLID.
DeviceProfile ConnectX7Infiniband();
// Intel E810 (irdma gen2), RoCE: vendor 0x8086, part 0x1593, inline 101.
DeviceProfile IntelE810();
// Intel X722 (irdma gen1), RoCE: vendor 0x8086, part 0x37D0, inline 48.
DeviceProfile IntelX722();
// Alibaba eRDMA: vendor 0x1ded, part 0x107f, inline 96.
DeviceProfile AlibabaErdma();
// Soft-RoCE (rxe): vendor 0xFFFFFF, part 0, inline 16..512, active MTU 1024.
DeviceProfile SoftRoce();

// --- The provider rules, as CreateQp and CreateCq apply them ---

// What the device grants for `requested` (an RC QP's ibv_qp_init_attr::cap):
// the values CreateQp writes back. Fails like ibv_create_qp: EINVAL
// (VerbsError("ibv_create_qp", EINVAL, why)) for a depth, scatter/gather count
// or inline size the device refuses.
absl::StatusOr<ibv_qp_cap> GrantQpCaps(const DeviceProfile& profile,
                                       const ibv_qp_cap& requested);

// The depth a CQ asked for `cqe` entries gets (what ibv_cq::cqe reports):
// EINVAL for cqe < 1 or above max_cqe.
absl::StatusOr<int> GrantCqDepth(const DeviceProfile& profile, int cqe);

}  // namespace rdma_transport::sim

#endif  // RDMA_TRANSPORT_SIM_DEVICE_PROFILE_H_
