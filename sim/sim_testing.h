// File: sim/sim_testing.h
//
// Test scaffolding over any `Verbs` backend (written for SimVerbs): an
// `Endpoint` is one side of an RC connection (context, PD, send and receive
// CQs, a registered buffer, a QP), and ConnectTo() brings its QP through
// INIT, RTR and RTS towards another endpoint the way an application would.
//
//   Fabric fabric;
//   SimVerbs verbs(&fabric);
//   auto a = *Endpoint::Create(&verbs, *fabric.AddDevice(ConnectX6()));
//   auto b = *Endpoint::Create(&verbs, *fabric.AddDevice(ConnectX6()));
//   ASSERT_TRUE(a->ConnectTo(*b).ok());
//   ASSERT_TRUE(b->ConnectTo(*a).ok());
//   ASSERT_TRUE(b->PostRecv(/*wr_id=*/1, /*offset=*/0, /*length=*/64).ok());
//   ASSERT_TRUE(a->PostSend(/*wr_id=*/2, IBV_WR_SEND, /*offset=*/0, 64).ok());
//   std::vector<ibv_wc> done = *b->PollRecvCq();
//
// Not thread-safe (an Endpoint belongs to one test thread; the backend's own
// thread-safety is unaffected). The Endpoint owns the verbs objects it made
// and destroys them, newest first, in Close() or its destructor.

#ifndef RDMA_TRANSPORT_SIM_SIM_TESTING_H_
#define RDMA_TRANSPORT_SIM_SIM_TESTING_H_

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport::sim {

struct EndpointOptions {
  ibv_qp_cap cap = {.max_send_wr = 16,
                    .max_recv_wr = 16,
                    .max_send_sge = 4,
                    .max_recv_sge = 4,
                    .max_inline_data = 0};
  int sq_sig_all = 0;
  int cqe = 64;
  size_t buffer_bytes = 64 * 1024;
  int mr_access =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  // Give both CQs one completion channel.
  bool with_completion_channel = false;
  // Use this endpoint's context and PD (not owned; it must outlive this
  // one) instead of opening the device: several QPs on one PD.
  const class Endpoint* share_pd_of = nullptr;
  // Take the QP's receives from this SRQ (on the same context); PostRecv
  // then fails as on hardware.
  ibv_srq* srq = nullptr;
};

struct ConnectOptions {
  int qp_access =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  ibv_mtu path_mtu = IBV_MTU_1024;
  // The GID index used on both sides (RoCE v2 IPv4-mapped: 1).
  uint8_t gid_index = 1;
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 12;
  uint8_t max_rd_atomic = 1;
  uint8_t max_dest_rd_atomic = 1;
  uint32_t sq_psn = 0;  // This side's first PSN.
  uint32_t rq_psn = 0;  // The first PSN expected from the peer.
  uint8_t traffic_class = 0;
  uint8_t service_level = 0;
  uint8_t hop_limit = 64;
};

class Endpoint {
 public:
  static absl::StatusOr<std::unique_ptr<Endpoint>> Create(
      Verbs* verbs, std::string_view device,
      const EndpointOptions& options = {});
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  // Destroys QP, MR, CQs, channel, PD and context; the first failure is
  // returned (and the rest still attempted). Idempotent.
  absl::Status Close();

  // RESET -> INIT -> RTR -> RTS towards `remote`'s QP.
  absl::Status ConnectTo(const Endpoint& remote,
                         const ConnectOptions& options = {});
  absl::Status ModifyToInit(const ConnectOptions& options = {});
  absl::Status ModifyToRtr(const Endpoint& remote,
                           const ConnectOptions& options = {});
  absl::Status ModifyToRts(const ConnectOptions& options = {});

  // One receive of `length` bytes of the buffer at `offset`.
  absl::Status PostRecv(uint64_t wr_id, size_t offset, size_t length);
  // One send WR over `length` bytes of the buffer at `offset` (num_sge 0 when
  // `length` is 0). RDMA opcodes target `remote_addr` / `rkey`.
  absl::Status PostSend(uint64_t wr_id, ibv_wr_opcode opcode, size_t offset,
                        size_t length, unsigned int flags = IBV_SEND_SIGNALED,
                        uint32_t imm_data = 0, uint64_t remote_addr = 0,
                        uint32_t rkey = 0);
  // Every completion available now (at most `max`).
  absl::StatusOr<std::vector<ibv_wc>> PollSendCq(int max = 64);
  absl::StatusOr<std::vector<ibv_wc>> PollRecvCq(int max = 64);

  uint8_t* data() { return buffer_.data(); }
  uint64_t address(size_t offset = 0) const {
    return reinterpret_cast<uintptr_t>(buffer_.data()) + offset;
  }
  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }
  uint32_t qp_num() const { return qp_->qp_num; }
  const std::string& device() const { return device_; }
  // The capabilities CreateQp granted.
  const ibv_qp_cap& cap() const { return cap_; }

  Verbs* verbs() const { return verbs_; }
  ibv_context* context() const { return context_; }
  ibv_pd* pd() const { return pd_; }
  ibv_comp_channel* channel() const { return channel_; }
  ibv_cq* send_cq() const { return send_cq_; }
  ibv_cq* recv_cq() const { return recv_cq_; }
  ibv_qp* qp() const { return qp_; }
  ibv_mr* mr() const { return mr_; }

 private:
  Endpoint(Verbs* verbs, std::string device)
      : verbs_(verbs), device_(std::move(device)) {}

  Verbs* const verbs_;
  const std::string device_;
  std::vector<uint8_t> buffer_;
  ibv_qp_cap cap_{};
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* send_cq_ = nullptr;
  ibv_cq* recv_cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_mr* mr_ = nullptr;
  bool owns_pd_ = true;  // false with EndpointOptions::share_pd_of
};

}  // namespace rdma_transport::sim

#endif  // RDMA_TRANSPORT_SIM_SIM_TESTING_H_
