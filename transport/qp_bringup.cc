#include "transport/qp_bringup.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "verbs_shim/verbs_error.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport {
namespace {

absl::Status Annotate(const absl::Status& status, const ibv_qp* qp,
                      const char* transition) {
  if (status.ok()) return status;
  return WithContext(status, absl::StrCat("QP ", qp->qp_num, " ", transition));
}

}  // namespace

absl::Status ModifyQpToInit(Verbs& verbs, ibv_qp* qp, const LocalRoute& local) {
  ibv_qp_attr attr = {};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = local.port;
  attr.qp_access_flags = kRcQpAccessFlags;
  return Annotate(verbs.ModifyQp(qp, &attr,
                                 IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                     IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
                  qp, "RESET->INIT");
}

absl::Status ModifyQpToRtr(Verbs& verbs, ibv_qp* qp, const LocalRoute& local,
                           const QpEndpoint& remote,
                           const TransportConfig& config) {
  const int mtu_bytes = std::min(local.mtu, remote.mtu);
  std::optional<ibv_mtu> path_mtu = MtuFromBytes(mtu_bytes);
  if (!path_mtu.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("QP ", qp->qp_num, " INIT->RTR: no valid path MTU (local ",
                     local.mtu, " bytes, remote ", remote.mtu, " bytes)"));
  }
  ibv_qp_attr attr = {};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = *path_mtu;
  attr.dest_qp_num = remote.qp_num;
  attr.rq_psn = remote.psn;
  attr.max_dest_rd_atomic = local.max_dest_rd_atomic;
  attr.min_rnr_timer = config.min_rnr_timer;
  attr.ah_attr.dlid = remote.lid;
  attr.ah_attr.sl = config.service_level.value_or(0);
  attr.ah_attr.src_path_bits = 0;
  attr.ah_attr.port_num = local.port;
  if (local.use_global_route) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = remote.gid;
    attr.ah_attr.grh.sgid_index = local.sgid_index;
    attr.ah_attr.grh.hop_limit = config.hop_limit;
    attr.ah_attr.grh.flow_label = 0;
    attr.ah_attr.grh.traffic_class = config.traffic_class.value_or(0);
  }
  return Annotate(
      verbs.ModifyQp(qp, &attr,
                     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                         IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
      qp, "INIT->RTR");
}

absl::Status ModifyQpToRts(Verbs& verbs, ibv_qp* qp, const LocalRoute& local,
                           const TransportConfig& config) {
  ibv_qp_attr attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = local.psn;
  attr.timeout = config.ack_timeout;
  attr.retry_cnt = config.retry_count;
  attr.rnr_retry = config.rnr_retry;
  attr.max_rd_atomic = local.max_rd_atomic;
  return Annotate(verbs.ModifyQp(qp, &attr,
                                 IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                                     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                     IBV_QP_MAX_QP_RD_ATOMIC),
                  qp, "RTR->RTS");
}

absl::Status BringUpRcQp(Verbs& verbs, ibv_qp* qp, const LocalRoute& local,
                         const QpEndpoint& remote,
                         const TransportConfig& config) {
  if (absl::Status status = ModifyQpToInit(verbs, qp, local); !status.ok()) {
    return status;
  }
  if (absl::Status status = ModifyQpToRtr(verbs, qp, local, remote, config);
      !status.ok()) {
    return status;
  }
  return ModifyQpToRts(verbs, qp, local, config);
}

absl::Status ModifyQpToError(Verbs& verbs, ibv_qp* qp) {
  ibv_qp_attr attr = {};
  attr.qp_state = IBV_QPS_ERR;
  return Annotate(verbs.ModifyQp(qp, &attr, IBV_QP_STATE), qp, "->ERR");
}

}  // namespace rdma_transport
