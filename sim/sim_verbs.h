// File: sim/sim_verbs.h
//
// `SimVerbs` is the `Verbs` backend over a simulated `Fabric`: the same calls,
// handles and errno values as libibverbs, served by simulated NICs.
//
//   Fabric fabric;
//   std::string name = *fabric.AddDevice(ConnectX7());
//   SimVerbs verbs(&fabric);
//   absl::StatusOr<ibv_context*> context = verbs.OpenDevice(name);
//
// Handles are real libibverbs structs (ibv_qp, ibv_cq, ...) with the fields
// verbs users read filled in (qp_num, state, context, pd, send_cq, cq->cqe,
// channel->fd, mr->lkey/rkey, context->async_fd, context->device->name).
// Their function tables are empty: pass them to this object, never to
// libibverbs. A handle that is unknown, already destroyed, or from another
// fabric is refused with EINVAL (never a crash).
//
// What is simulated: RC QPs only (UD/UC/XRC fail with EOPNOTSUPP); SEND,
// SEND_WITH_IMM, RDMA_WRITE, RDMA_WRITE_WITH_IMM and RDMA_READ; type 2
// memory windows (AllocMw, IBV_WR_BIND_MW, IBV_WR_LOCAL_INV) on profiles
// with max_mw > 0 (atomics and type 1 windows fail: EINVAL at post,
// EOPNOTSUPP at AllocMw); shared receive queues on profiles with max_srq > 0
// (receives taken in posting order by whichever attached QP a message
// reaches, an empty SRQ RNR-NAKs like an empty RQ, the limit event,
// EBUSY destroying one with QPs attached; EOPNOTSUPP elsewhere). See
// docs/simulator.md for the
// full model and where it departs from a given provider.
//
// Does not own the fabric, which must outlive it. Thread-safe as verbs is:
// every method may be called from any thread (see Fabric). GetCqEvent and
// GetAsyncEvent block in read(2) on the eventfd unless the caller set
// O_NONBLOCK on it, as libibverbs does. PostSend, PostRecv and PollCq
// (and PostSrqRecv) allocate nothing in steady state.

#ifndef RDMA_TRANSPORT_SIM_SIM_VERBS_H_
#define RDMA_TRANSPORT_SIM_SIM_VERBS_H_

#include "sim/fabric.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport::sim {

class SimVerbs final : public Verbs {
 public:
  explicit SimVerbs(Fabric* fabric);

  Fabric* fabric() const { return fabric_; }

  // The fabric's clock, waits and setup channel (sim/sim_env.h).
  Env& env() override;

  absl::StatusOr<std::vector<std::string>> ListDevices() override;
  absl::StatusOr<ibv_context*> OpenDevice(std::string_view name) override;
  absl::Status CloseDevice(ibv_context* context) override;
  absl::Status QueryDevice(ibv_context* context,
                           ibv_device_attr* attr) override;
  absl::Status QueryPort(ibv_context* context, uint8_t port,
                         ibv_port_attr* attr) override;
  absl::Status QueryGid(ibv_context* context, uint8_t port, uint32_t index,
                        ibv_gid_entry* entry) override;
  absl::StatusOr<size_t> QueryGidTable(
      ibv_context* context, std::span<ibv_gid_entry> entries) override;
  absl::StatusOr<ibv_pd*> AllocPd(ibv_context* context) override;
  absl::Status DeallocPd(ibv_pd* pd) override;
  absl::StatusOr<ibv_mr*> RegMr(ibv_pd* pd, void* addr, size_t length,
                                int access) override;
  absl::Status DeregMr(ibv_mr* mr) override;
  absl::StatusOr<ibv_mw*> AllocMw(ibv_pd* pd, ibv_mw_type type) override;
  absl::Status DeallocMw(ibv_mw* mw) override;
  absl::StatusOr<ibv_comp_channel*> CreateCompChannel(
      ibv_context* context) override;
  absl::Status DestroyCompChannel(ibv_comp_channel* channel) override;
  absl::StatusOr<ibv_cq*> CreateCq(ibv_context* context, int cqe,
                                   void* cq_context, ibv_comp_channel* channel,
                                   int comp_vector) override;
  absl::Status DestroyCq(ibv_cq* cq) override;
  absl::Status ReqNotifyCq(ibv_cq* cq, bool solicited_only) override;
  absl::Status GetCqEvent(ibv_comp_channel* channel, ibv_cq** cq,
                          void** cq_context) override;
  void AckCqEvents(ibv_cq* cq, unsigned int count) override;
  absl::StatusOr<ibv_qp*> CreateQp(ibv_pd* pd,
                                   ibv_qp_init_attr* init_attr) override;
  absl::Status ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) override;
  absl::Status QueryQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask,
                       ibv_qp_init_attr* init_attr) override;
  absl::Status DestroyQp(ibv_qp* qp) override;
  absl::Status PostSend(ibv_qp* qp, ibv_send_wr* wr,
                        ibv_send_wr** bad_wr) override;
  absl::Status PostRecv(ibv_qp* qp, ibv_recv_wr* wr,
                        ibv_recv_wr** bad_wr) override;
  absl::StatusOr<int> PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) override;
  absl::StatusOr<ibv_srq*> CreateSrq(ibv_pd* pd,
                                     ibv_srq_init_attr* init_attr) override;
  absl::Status ModifySrq(ibv_srq* srq, ibv_srq_attr* attr,
                         int attr_mask) override;
  absl::Status DestroySrq(ibv_srq* srq) override;
  absl::Status PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr,
                           ibv_recv_wr** bad_wr) override;
  absl::StatusOr<ibv_ah*> CreateAh(ibv_pd* pd, ibv_ah_attr* attr) override;
  absl::Status DestroyAh(ibv_ah* ah) override;
  absl::StatusOr<TrafficClassFile> ReadTrafficClassFile(ibv_context* context,
                                                        uint8_t port) override;
  absl::Status GetAsyncEvent(ibv_context* context,
                             ibv_async_event* event) override;
  void AckAsyncEvent(ibv_async_event* event) override;

 private:
  Fabric* const fabric_;
};

}  // namespace rdma_transport::sim

#endif  // RDMA_TRANSPORT_SIM_SIM_VERBS_H_
