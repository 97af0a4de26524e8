// File: verbs_shim/verbs_wrapper.h
//
// `VerbsWrapper` forwards every call to another `Verbs`. Subclass it and
// override the calls to observe or to fail, as LevelDB's `EnvWrapper`:
//
//   class RefuseRegMr : public VerbsWrapper {
//    public:
//     using VerbsWrapper::VerbsWrapper;
//     absl::StatusOr<ibv_mr*> RegMr(ibv_pd*, void*, size_t, int) override {
//       return VerbsError("ibv_reg_mr", ENOMEM);
//     }
//   };
//
// The wrapper does not own `target`, which must outlive it. Thread-safety is
// the target's.

#ifndef RDMA_TRANSPORT_VERBS_SHIM_VERBS_WRAPPER_H_
#define RDMA_TRANSPORT_VERBS_SHIM_VERBS_WRAPPER_H_

#include "verbs_shim/verbs.h"

namespace rdma_transport {

class VerbsWrapper : public Verbs {
 public:
  explicit VerbsWrapper(Verbs* target) : target_(target) {}

  Verbs* target() const { return target_; }

  Env& env() override { return target_->env(); }

  absl::StatusOr<std::vector<std::string>> ListDevices() override {
    return target_->ListDevices();
  }
  absl::StatusOr<ibv_context*> OpenDevice(std::string_view name) override {
    return target_->OpenDevice(name);
  }
  absl::Status CloseDevice(ibv_context* context) override {
    return target_->CloseDevice(context);
  }
  absl::Status QueryDevice(ibv_context* context,
                           ibv_device_attr* attr) override {
    return target_->QueryDevice(context, attr);
  }
  absl::Status QueryPort(ibv_context* context, uint8_t port,
                         ibv_port_attr* attr) override {
    return target_->QueryPort(context, port, attr);
  }
  absl::Status QueryGid(ibv_context* context, uint8_t port, uint32_t index,
                        ibv_gid_entry* entry) override {
    return target_->QueryGid(context, port, index, entry);
  }
  absl::StatusOr<size_t> QueryGidTable(
      ibv_context* context, std::span<ibv_gid_entry> entries) override {
    return target_->QueryGidTable(context, entries);
  }
  absl::StatusOr<ibv_pd*> AllocPd(ibv_context* context) override {
    return target_->AllocPd(context);
  }
  absl::Status DeallocPd(ibv_pd* pd) override { return target_->DeallocPd(pd); }
  absl::StatusOr<ibv_mr*> RegMr(ibv_pd* pd, void* addr, size_t length,
                                int access) override {
    return target_->RegMr(pd, addr, length, access);
  }
  absl::Status DeregMr(ibv_mr* mr) override { return target_->DeregMr(mr); }
  absl::StatusOr<ibv_mw*> AllocMw(ibv_pd* pd, ibv_mw_type type) override {
    return target_->AllocMw(pd, type);
  }
  absl::Status DeallocMw(ibv_mw* mw) override { return target_->DeallocMw(mw); }
  absl::StatusOr<ibv_comp_channel*> CreateCompChannel(
      ibv_context* context) override {
    return target_->CreateCompChannel(context);
  }
  absl::Status DestroyCompChannel(ibv_comp_channel* channel) override {
    return target_->DestroyCompChannel(channel);
  }
  absl::StatusOr<ibv_cq*> CreateCq(ibv_context* context, int cqe,
                                   void* cq_context, ibv_comp_channel* channel,
                                   int comp_vector) override {
    return target_->CreateCq(context, cqe, cq_context, channel, comp_vector);
  }
  absl::Status DestroyCq(ibv_cq* cq) override { return target_->DestroyCq(cq); }
  absl::Status ReqNotifyCq(ibv_cq* cq, bool solicited_only) override {
    return target_->ReqNotifyCq(cq, solicited_only);
  }
  absl::Status GetCqEvent(ibv_comp_channel* channel, ibv_cq** cq,
                          void** cq_context) override {
    return target_->GetCqEvent(channel, cq, cq_context);
  }
  void AckCqEvents(ibv_cq* cq, unsigned int count) override {
    target_->AckCqEvents(cq, count);
  }
  absl::StatusOr<ibv_qp*> CreateQp(ibv_pd* pd,
                                   ibv_qp_init_attr* init_attr) override {
    return target_->CreateQp(pd, init_attr);
  }
  absl::Status ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) override {
    return target_->ModifyQp(qp, attr, attr_mask);
  }
  absl::Status QueryQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask,
                       ibv_qp_init_attr* init_attr) override {
    return target_->QueryQp(qp, attr, attr_mask, init_attr);
  }
  absl::Status DestroyQp(ibv_qp* qp) override { return target_->DestroyQp(qp); }
  absl::Status PostSend(ibv_qp* qp, ibv_send_wr* wr,
                        ibv_send_wr** bad_wr) override {
    return target_->PostSend(qp, wr, bad_wr);
  }
  absl::Status PostRecv(ibv_qp* qp, ibv_recv_wr* wr,
                        ibv_recv_wr** bad_wr) override {
    return target_->PostRecv(qp, wr, bad_wr);
  }
  absl::StatusOr<int> PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) override {
    return target_->PollCq(cq, num_entries, wc);
  }
  absl::StatusOr<ibv_srq*> CreateSrq(ibv_pd* pd,
                                     ibv_srq_init_attr* init_attr) override {
    return target_->CreateSrq(pd, init_attr);
  }
  absl::Status ModifySrq(ibv_srq* srq, ibv_srq_attr* attr,
                         int attr_mask) override {
    return target_->ModifySrq(srq, attr, attr_mask);
  }
  absl::Status DestroySrq(ibv_srq* srq) override {
    return target_->DestroySrq(srq);
  }
  absl::Status PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr,
                           ibv_recv_wr** bad_wr) override {
    return target_->PostSrqRecv(srq, wr, bad_wr);
  }
  absl::StatusOr<ibv_ah*> CreateAh(ibv_pd* pd, ibv_ah_attr* attr) override {
    return target_->CreateAh(pd, attr);
  }
  absl::Status DestroyAh(ibv_ah* ah) override { return target_->DestroyAh(ah); }
  absl::StatusOr<TrafficClassFile> ReadTrafficClassFile(ibv_context* context,
                                                        uint8_t port) override {
    return target_->ReadTrafficClassFile(context, port);
  }
  absl::Status GetAsyncEvent(ibv_context* context,
                             ibv_async_event* event) override {
    return target_->GetAsyncEvent(context, event);
  }
  void AckAsyncEvent(ibv_async_event* event) override {
    target_->AckAsyncEvent(event);
  }

 private:
  Verbs* const target_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_VERBS_SHIM_VERBS_WRAPPER_H_
