// File: verbs_shim/ibverbs_backend.h
//
// `IbverbsBackend`: the `Verbs` backend over libibverbs, for real devices
// (ConnectX/mlx5, Intel irdma, Alibaba eRDMA) and Soft-RoCE (rxe). Each
// method is the verbs call of the same name and nothing more; failures are
// `VerbsError()` statuses carrying verbs' errno.
//
// Stateless and safe for concurrent use: it owns nothing; every handle it
// returns belongs to the caller (see verbs.h).

#ifndef RDMA_TRANSPORT_VERBS_SHIM_IBVERBS_BACKEND_H_
#define RDMA_TRANSPORT_VERBS_SHIM_IBVERBS_BACKEND_H_

#include "verbs_shim/verbs.h"

namespace rdma_transport {

class IbverbsBackend final : public Verbs {
 public:
  IbverbsBackend() = default;

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
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_VERBS_SHIM_IBVERBS_BACKEND_H_
