#include "sim/internal/qp_transitions.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace rdma_transport::sim::internal {

QpTransition RcQpTransition(ibv_qp_state from, ibv_qp_state to) {
  // Any state may be reset or moved to the error state, with nothing else.
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return {true, 0, 0};
  switch (from) {
    case IBV_QPS_RESET:
      if (to == IBV_QPS_INIT) {
        return {true, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0};
      }
      break;
    case IBV_QPS_INIT:
      if (to == IBV_QPS_INIT) {
        return {true, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS};
      }
      if (to == IBV_QPS_RTR) {
        return {true,
                IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX};
      }
      break;
    case IBV_QPS_RTR:
      if (to == IBV_QPS_RTS) {
        return {true,
                IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
                IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
                    IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE};
      }
      break;
    case IBV_QPS_RTS:
      if (to == IBV_QPS_RTS) {
        return {true, 0,
                IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH |
                    IBV_QP_PATH_MIG_STATE | IBV_QP_MIN_RNR_TIMER};
      }
      if (to == IBV_QPS_SQD) return {true, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY};
      break;
    case IBV_QPS_SQD:
      if (to == IBV_QPS_RTS) {
        return {true, 0,
                IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
                    IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE};
      }
      if (to == IBV_QPS_SQD) {
        return {true, 0,
                IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC |
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_ALT_PATH |
                    IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
                    IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE};
      }
      break;
    default:
      break;
  }
  return {};
}

std::string QpAttrMaskNames(int mask) {
  static constexpr struct {
    int bit;
    const char* name;
  } kNames[] = {
      {IBV_QP_STATE, "IBV_QP_STATE"},
      {IBV_QP_CUR_STATE, "IBV_QP_CUR_STATE"},
      {IBV_QP_EN_SQD_ASYNC_NOTIFY, "IBV_QP_EN_SQD_ASYNC_NOTIFY"},
      {IBV_QP_ACCESS_FLAGS, "IBV_QP_ACCESS_FLAGS"},
      {IBV_QP_PKEY_INDEX, "IBV_QP_PKEY_INDEX"},
      {IBV_QP_PORT, "IBV_QP_PORT"},
      {IBV_QP_QKEY, "IBV_QP_QKEY"},
      {IBV_QP_AV, "IBV_QP_AV"},
      {IBV_QP_PATH_MTU, "IBV_QP_PATH_MTU"},
      {IBV_QP_TIMEOUT, "IBV_QP_TIMEOUT"},
      {IBV_QP_RETRY_CNT, "IBV_QP_RETRY_CNT"},
      {IBV_QP_RNR_RETRY, "IBV_QP_RNR_RETRY"},
      {IBV_QP_RQ_PSN, "IBV_QP_RQ_PSN"},
      {IBV_QP_MAX_QP_RD_ATOMIC, "IBV_QP_MAX_QP_RD_ATOMIC"},
      {IBV_QP_ALT_PATH, "IBV_QP_ALT_PATH"},
      {IBV_QP_MIN_RNR_TIMER, "IBV_QP_MIN_RNR_TIMER"},
      {IBV_QP_SQ_PSN, "IBV_QP_SQ_PSN"},
      {IBV_QP_MAX_DEST_RD_ATOMIC, "IBV_QP_MAX_DEST_RD_ATOMIC"},
      {IBV_QP_PATH_MIG_STATE, "IBV_QP_PATH_MIG_STATE"},
      {IBV_QP_CAP, "IBV_QP_CAP"},
      {IBV_QP_DEST_QPN, "IBV_QP_DEST_QPN"},
      {IBV_QP_RATE_LIMIT, "IBV_QP_RATE_LIMIT"},
  };
  std::string names;
  int known = 0;
  for (const auto& entry : kNames) {
    known |= entry.bit;
    if ((mask & entry.bit) == 0) continue;
    if (!names.empty()) names += "|";
    names += entry.name;
  }
  if ((mask & ~known) != 0) {
    if (!names.empty()) names += "|";
    absl::StrAppend(&names, "0x", absl::Hex(mask & ~known));
  }
  return names.empty() ? "0" : names;
}

}  // namespace rdma_transport::sim::internal
