// File: sim/internal/qp_transitions.h
//
// The RC QP state machine of the IB spec, as the kernel's qp_state_table
// (drivers/infiniband/core/verbs.c) encodes it: for each (current, next)
// state, whether ibv_modify_qp may make the move, the attributes it requires
// and those it also accepts. Everything else fails with EINVAL. Pure data;
// thread-safe.

#ifndef RDMA_TRANSPORT_SIM_INTERNAL_QP_TRANSITIONS_H_
#define RDMA_TRANSPORT_SIM_INTERNAL_QP_TRANSITIONS_H_

#include <infiniband/verbs.h>

#include <string>

namespace rdma_transport::sim::internal {

struct QpTransition {
  bool legal = false;
  int required_mask = 0;  // Besides IBV_QP_STATE.
  int optional_mask = 0;
};

// The rule for an RC QP moving from `from` to `to` (`to` == `from` for a
// modify without IBV_QP_STATE).
QpTransition RcQpTransition(ibv_qp_state from, ibv_qp_state to);

// "IBV_QP_AV|IBV_QP_PATH_MTU", for error messages.
std::string QpAttrMaskNames(int mask);

}  // namespace rdma_transport::sim::internal

#endif  // RDMA_TRANSPORT_SIM_INTERNAL_QP_TRANSITIONS_H_
