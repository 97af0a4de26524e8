// File: transport/qp_bringup.h
//
// Bringing an RC QP from RESET to RTS against a remote QP:
//
//   RESET -> INIT   port, pkey index 0, access flags
//   INIT  -> RTR    path MTU (smaller of both sides), remote QPN and PSN,
//                   responder resources, minimum RNR timer, and the address
//                   vector: for RoCE a global route (is_global = 1, dgid,
//                   sgid_index, hop_limit, traffic_class = MC_IB_TC) with
//                   IBV_QP_AV in the mask; sl = MC_IB_SL
//   RTR   -> RTS    send PSN, ACK timeout, retry count, RNR retry,
//                   initiator depth
//
// Stateless; the QP must not be used concurrently while it is brought up.
// Errors: the verbs error of the failing ibv_modify_qp, with the QP number
// and the transition in the message (VerbsErrno() still gives the errno).

#ifndef RDMA_TRANSPORT_TRANSPORT_QP_BRINGUP_H_
#define RDMA_TRANSPORT_TRANSPORT_QP_BRINGUP_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "transport/config.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport {

// What one side tells the other so both can connect their RC QPs. The
// handshake carries it on the wire.
struct QpEndpoint {
  uint32_t qp_num = 0;
  uint32_t psn = 0;  // 24 bits
  ibv_gid gid = {};
  uint16_t lid = 0;
  uint8_t port = 1;
  // The largest path MTU this side accepts, in bytes: the smaller of its
  // configured MC_MTU and its port's active MTU.
  int mtu = 0;
};

// This side's routing facts for one QP.
struct LocalRoute {
  uint8_t port = 1;
  uint32_t sgid_index = 0;
  // A GRH is required on RoCE (and for a traffic class on InfiniBand).
  bool use_global_route = true;
  int mtu = 0;  // as QpEndpoint::mtu
  // Outstanding RDMA READs this QP may issue / accept (bounded by the
  // device's max_qp_init_rd_atom / max_qp_rd_atom).
  uint8_t max_rd_atomic = 1;
  uint8_t max_dest_rd_atomic = 1;
  uint32_t psn = 0;  // this side's initial send PSN
};

// What a handshake settled for one QP, applied over the Context's own
// route and settings (transport/negotiation.h computes it).
struct QpPathSettings {
  uint8_t max_rd_atomic = 1;
  uint8_t max_dest_rd_atomic = 1;
  std::optional<int> traffic_class;  // replaces MC_IB_TC for this QP
  std::optional<int> service_level;  // replaces MC_IB_SL for this QP
};

// Access flags every transport QP gets; memory regions carry the real
// permission, per region (least privilege).
inline constexpr int kRcQpAccessFlags =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

absl::Status ModifyQpToInit(Verbs& verbs, ibv_qp* qp, const LocalRoute& local);
absl::Status ModifyQpToRtr(Verbs& verbs, ibv_qp* qp, const LocalRoute& local,
                           const QpEndpoint& remote,
                           const TransportConfig& config);
absl::Status ModifyQpToRts(Verbs& verbs, ibv_qp* qp, const LocalRoute& local,
                           const TransportConfig& config);

// INIT, RTR and RTS in turn.
absl::Status BringUpRcQp(Verbs& verbs, ibv_qp* qp, const LocalRoute& local,
                         const QpEndpoint& remote,
                         const TransportConfig& config);

// Moves the QP to ERR: outstanding work requests complete with
// IBV_WC_WR_FLUSH_ERR.
absl::Status ModifyQpToError(Verbs& verbs, ibv_qp* qp);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_QP_BRINGUP_H_
