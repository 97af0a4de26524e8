#include "sim/sim_testing.h"

#include <utility>

namespace rdma_transport::sim {
namespace {

// Keeps the first error.
void Accumulate(absl::Status& first, absl::Status next) {
  if (first.ok() && !next.ok()) first = std::move(next);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Endpoint>> Endpoint::Create(
    Verbs* verbs, std::string_view device, const EndpointOptions& options) {
  std::unique_ptr<Endpoint> endpoint(new Endpoint(verbs, std::string(device)));
  endpoint->buffer_.assign(options.buffer_bytes, 0);

  if (options.share_pd_of != nullptr) {
    endpoint->context_ = options.share_pd_of->context_;
    endpoint->pd_ = options.share_pd_of->pd_;
    endpoint->owns_pd_ = false;
  } else {
    absl::StatusOr<ibv_context*> context = verbs->OpenDevice(device);
    if (!context.ok()) return context.status();
    endpoint->context_ = *context;

    absl::StatusOr<ibv_pd*> pd = verbs->AllocPd(endpoint->context_);
    if (!pd.ok()) return pd.status();
    endpoint->pd_ = *pd;
  }

  if (options.with_completion_channel) {
    absl::StatusOr<ibv_comp_channel*> channel =
        verbs->CreateCompChannel(endpoint->context_);
    if (!channel.ok()) return channel.status();
    endpoint->channel_ = *channel;
  }
  absl::StatusOr<ibv_cq*> send_cq = verbs->CreateCq(
      endpoint->context_, options.cqe, endpoint.get(), endpoint->channel_, 0);
  if (!send_cq.ok()) return send_cq.status();
  endpoint->send_cq_ = *send_cq;
  absl::StatusOr<ibv_cq*> recv_cq = verbs->CreateCq(
      endpoint->context_, options.cqe, endpoint.get(), endpoint->channel_, 0);
  if (!recv_cq.ok()) return recv_cq.status();
  endpoint->recv_cq_ = *recv_cq;

  absl::StatusOr<ibv_mr*> mr =
      verbs->RegMr(endpoint->pd_, endpoint->buffer_.data(),
                   endpoint->buffer_.size(), options.mr_access);
  if (!mr.ok()) return mr.status();
  endpoint->mr_ = *mr;

  ibv_qp_init_attr init_attr{};
  init_attr.send_cq = endpoint->send_cq_;
  init_attr.recv_cq = endpoint->recv_cq_;
  init_attr.cap = options.cap;
  init_attr.qp_type = IBV_QPT_RC;
  init_attr.sq_sig_all = options.sq_sig_all;
  init_attr.srq = options.srq;
  absl::StatusOr<ibv_qp*> qp = verbs->CreateQp(endpoint->pd_, &init_attr);
  if (!qp.ok()) return qp.status();
  endpoint->qp_ = *qp;
  endpoint->cap_ = init_attr.cap;
  return endpoint;
}

Endpoint::~Endpoint() { Close().IgnoreError(); }

absl::Status Endpoint::Close() {
  absl::Status first;
  if (qp_ != nullptr) {
    Accumulate(first, verbs_->DestroyQp(qp_));
    qp_ = nullptr;
  }
  if (mr_ != nullptr) {
    Accumulate(first, verbs_->DeregMr(mr_));
    mr_ = nullptr;
  }
  for (ibv_cq** cq : {&recv_cq_, &send_cq_}) {
    if (*cq == nullptr) continue;
    Accumulate(first, verbs_->DestroyCq(*cq));
    *cq = nullptr;
  }
  if (channel_ != nullptr) {
    Accumulate(first, verbs_->DestroyCompChannel(channel_));
    channel_ = nullptr;
  }
  if (!owns_pd_) {
    pd_ = nullptr;
    context_ = nullptr;
  }
  if (pd_ != nullptr) {
    Accumulate(first, verbs_->DeallocPd(pd_));
    pd_ = nullptr;
  }
  if (context_ != nullptr) {
    Accumulate(first, verbs_->CloseDevice(context_));
    context_ = nullptr;
  }
  return first;
}

absl::Status Endpoint::ConnectTo(const Endpoint& remote,
                                 const ConnectOptions& options) {
  if (absl::Status status = ModifyToInit(options); !status.ok()) return status;
  if (absl::Status status = ModifyToRtr(remote, options); !status.ok()) {
    return status;
  }
  return ModifyToRts(options);
}

absl::Status Endpoint::ModifyToInit(const ConnectOptions& options) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = 1;
  attr.qp_access_flags = static_cast<unsigned int>(options.qp_access);
  return verbs_->ModifyQp(
      qp_, &attr,
      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

absl::Status Endpoint::ModifyToRtr(const Endpoint& remote,
                                   const ConnectOptions& options) {
  ibv_port_attr port{};
  if (absl::Status status = verbs_->QueryPort(remote.context_, 1, &port);
      !status.ok()) {
    return status;
  }
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = options.path_mtu;
  attr.dest_qp_num = remote.qp_->qp_num;
  attr.rq_psn = options.rq_psn;
  attr.max_dest_rd_atomic = options.max_dest_rd_atomic;
  attr.min_rnr_timer = options.min_rnr_timer;
  attr.ah_attr.port_num = 1;
  attr.ah_attr.sl = options.service_level;
  if (port.link_layer == IBV_LINK_LAYER_ETHERNET) {
    ibv_gid_entry remote_gid{};
    if (absl::Status status = verbs_->QueryGid(remote.context_, 1,
                                               options.gid_index, &remote_gid);
        !status.ok()) {
      return status;
    }
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = remote_gid.gid;
    attr.ah_attr.grh.sgid_index = options.gid_index;
    attr.ah_attr.grh.hop_limit = options.hop_limit;
    attr.ah_attr.grh.traffic_class = options.traffic_class;
  } else {
    attr.ah_attr.dlid = port.lid;
  }
  return verbs_->ModifyQp(qp_, &attr,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                              IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

absl::Status Endpoint::ModifyToRts(const ConnectOptions& options) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = options.sq_psn;
  attr.timeout = options.timeout;
  attr.retry_cnt = options.retry_cnt;
  attr.rnr_retry = options.rnr_retry;
  attr.max_rd_atomic = options.max_rd_atomic;
  return verbs_->ModifyQp(qp_, &attr,
                          IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                              IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_MAX_QP_RD_ATOMIC);
}

absl::Status Endpoint::PostRecv(uint64_t wr_id, size_t offset, size_t length) {
  ibv_sge sge{};
  sge.addr = address(offset);
  sge.length = static_cast<uint32_t>(length);
  sge.lkey = mr_->lkey;
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return verbs_->PostRecv(qp_, &wr, &bad);
}

absl::Status Endpoint::PostSend(uint64_t wr_id, ibv_wr_opcode opcode,
                                size_t offset, size_t length,
                                unsigned int flags, uint32_t imm_data,
                                uint64_t remote_addr, uint32_t rkey) {
  ibv_sge sge{};
  sge.addr = address(offset);
  sge.length = static_cast<uint32_t>(length);
  sge.lkey = mr_->lkey;
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = length > 0 ? &sge : nullptr;
  wr.num_sge = length > 0 ? 1 : 0;
  wr.opcode = opcode;
  wr.send_flags = flags;
  wr.imm_data = imm_data;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return verbs_->PostSend(qp_, &wr, &bad);
}

namespace {

absl::StatusOr<std::vector<ibv_wc>> PollAll(Verbs* verbs, ibv_cq* cq, int max) {
  std::vector<ibv_wc> completions(static_cast<size_t>(max));
  absl::StatusOr<int> count = verbs->PollCq(cq, max, completions.data());
  if (!count.ok()) return count.status();
  completions.resize(static_cast<size_t>(*count));
  return completions;
}

}  // namespace

absl::StatusOr<std::vector<ibv_wc>> Endpoint::PollSendCq(int max) {
  return PollAll(verbs_, send_cq_, max);
}

absl::StatusOr<std::vector<ibv_wc>> Endpoint::PollRecvCq(int max) {
  return PollAll(verbs_, recv_cq_, max);
}

}  // namespace rdma_transport::sim
