// File: verbs_shim/verbs.h
//
// `Verbs` is the seam between rdma_transport and an RDMA device: one virtual
// method for each verbs call the transport makes, and nothing else. It is the
// rdma_transport analogue of LevelDB's `Env`.
//
// The methods take and return libibverbs' own structs (`ibv_qp_init_attr`,
// `ibv_qp_attr`, `ibv_send_wr`, `ibv_wc`, ...) and handles (`ibv_qp*`, ...), so
// the real backend is a pass-through and a verbs programmer reads them as the
// verbs they are. Failures come back as `absl::Status` built by `VerbsError()`
// (verbs_error.h): the message names the call and carries the errno text, and
// `VerbsErrno(status)` gives the errno back, so callers can still act on the
// exact value (inline-size negotiation retries on EINVAL and on nothing else).
//
// Backends:
//   IbverbsBackend  (verbs_shim/ibverbs_backend.h)  libibverbs: mlx5, irdma, erdma, rxe
//   MockVerbs       (verbs_shim/mock_verbs.h)       gMock, for exact interaction tests
//   SimVerbs        (sim/sim_verbs.h)               a simulated NIC and fabric
//   VerbsWrapper    (verbs_shim/verbs_wrapper.h)    forwards; subclass to inject faults
//
// A backend holds no policy: which inline size to ask for, which GID to pick,
// how to bring a QP up, all of it lives in transport/.
//
// Handles: every handle a backend returns is owned by the caller until passed
// to the matching destroy call on the same backend, and must outlive nothing
// it depends on (QPs before CQs, SRQs and PD, SRQs before the PD, MWs before
// the MR bound and the PD, MRs before PD, PD/CQs before the context), exactly
// as in verbs; a backend refuses out-of-order destruction with EBUSY where
// verbs does.
//
// Thread-safety: as libibverbs. Every method may be called concurrently from
// any thread; calls on the same QP or CQ (posting from one thread and polling
// from another included) are safe. The data-path methods (`PostSend`,
// `PostRecv`, `PollCq`) allocate nothing on success.

#ifndef RDMA_TRANSPORT_VERBS_SHIM_VERBS_H_
#define RDMA_TRANSPORT_VERBS_SHIM_VERBS_H_

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "verbs_shim/env.h"

namespace rdma_transport {

class Verbs {
 public:
  Verbs() = default;
  Verbs(const Verbs&) = delete;
  Verbs& operator=(const Verbs&) = delete;
  virtual ~Verbs() = default;

  // The clock, waits and setup channel that go with these devices
  // (verbs_shim/env.h): the real ones, unless the devices are simulated.
  virtual Env& env() { return Env::Real(); }

  // --- Devices (ibv_get_device_list, ibv_open_device, ibv_close_device) ---

  // Names of the RDMA devices present ("mlx5_0", "rxe0", ...). An empty list
  // is not an error: a machine without RDMA has none.
  virtual absl::StatusOr<std::vector<std::string>> ListDevices() = 0;
  // Opens the device named `name`; kNotFound if there is none by that name.
  virtual absl::StatusOr<ibv_context*> OpenDevice(std::string_view name) = 0;
  virtual absl::Status CloseDevice(ibv_context* context) = 0;

  // --- Queries (ibv_query_device, ibv_query_port, ibv_query_gid_ex,
  //     ibv_query_gid_table) ---

  virtual absl::Status QueryDevice(ibv_context* context,
                                   ibv_device_attr* attr) = 0;
  virtual absl::Status QueryPort(ibv_context* context, uint8_t port,
                                 ibv_port_attr* attr) = 0;
  // One GID table entry, with its type (IB, RoCE v1, RoCE v2). An empty slot
  // fails with ENODATA, as ibv_query_gid_ex does.
  virtual absl::Status QueryGid(ibv_context* context, uint8_t port,
                                uint32_t index, ibv_gid_entry* entry) = 0;
  // Every valid GID entry of every port, at most `entries.size()`; returns
  // how many were written.
  virtual absl::StatusOr<size_t> QueryGidTable(
      ibv_context* context, std::span<ibv_gid_entry> entries) = 0;

  // --- Protection domains and memory regions ---

  virtual absl::StatusOr<ibv_pd*> AllocPd(ibv_context* context) = 0;
  virtual absl::Status DeallocPd(ibv_pd* pd) = 0;
  // `access` is a mask of ibv_access_flags.
  virtual absl::StatusOr<ibv_mr*> RegMr(ibv_pd* pd, void* addr, size_t length,
                                        int access) = 0;
  virtual absl::Status DeregMr(ibv_mr* mr) = 0;

  // --- Memory windows (ibv_alloc_mw, ibv_dealloc_mw) ---

  // A window of `type` on `pd`, bound to nothing. A type 2 window is bound
  // (and unbound) by work requests on a QP: IBV_WR_BIND_MW and
  // IBV_WR_LOCAL_INV through PostSend. Fails with EOPNOTSUPP where the
  // provider has no memory windows, ENOMEM when the device's max_mw is
  // reached. Deallocating a bound window invalidates it: its rkey is dead.
  virtual absl::StatusOr<ibv_mw*> AllocMw(ibv_pd* pd, ibv_mw_type type) = 0;
  virtual absl::Status DeallocMw(ibv_mw* mw) = 0;

  // --- Completion channels and completion queues ---

  // The channel's `fd` is pollable (epoll/poll) for completion events.
  virtual absl::StatusOr<ibv_comp_channel*> CreateCompChannel(
      ibv_context* context) = 0;
  virtual absl::Status DestroyCompChannel(ibv_comp_channel* channel) = 0;
  // `channel` may be null (no completion events).
  virtual absl::StatusOr<ibv_cq*> CreateCq(ibv_context* context, int cqe,
                                           void* cq_context,
                                           ibv_comp_channel* channel,
                                           int comp_vector) = 0;
  virtual absl::Status DestroyCq(ibv_cq* cq) = 0;
  // Arms `cq` to raise one completion event on its channel.
  virtual absl::Status ReqNotifyCq(ibv_cq* cq, bool solicited_only) = 0;
  // Takes one completion event from `channel`. Blocks unless the channel's fd
  // is non-blocking, in which case it fails with EAGAIN when none is ready.
  virtual absl::Status GetCqEvent(ibv_comp_channel* channel, ibv_cq** cq,
                                  void** cq_context) = 0;
  virtual void AckCqEvents(ibv_cq* cq, unsigned int count) = 0;

  // --- Queue pairs ---

  // On success `init_attr->cap` holds what the device granted (it may be more
  // than asked: mlx5 rounds max_inline_data up). Failure keeps verbs' errno:
  // EINVAL for a capability the device refuses, ENOMEM for exhaustion.
  virtual absl::StatusOr<ibv_qp*> CreateQp(ibv_pd* pd,
                                           ibv_qp_init_attr* init_attr) = 0;
  // `attr_mask` is a mask of ibv_qp_attr_mask. An illegal transition or a
  // missing required attribute fails with EINVAL.
  virtual absl::Status ModifyQp(ibv_qp* qp, ibv_qp_attr* attr,
                                int attr_mask) = 0;
  virtual absl::Status QueryQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask,
                               ibv_qp_init_attr* init_attr) = 0;
  virtual absl::Status DestroyQp(ibv_qp* qp) = 0;

  // --- Data path: allocation-free on success (PostSrqRecv too) ---

  // On failure `*bad_wr` points at the first work request not posted.
  virtual absl::Status PostSend(ibv_qp* qp, ibv_send_wr* wr,
                                ibv_send_wr** bad_wr) = 0;
  virtual absl::Status PostRecv(ibv_qp* qp, ibv_recv_wr* wr,
                                ibv_recv_wr** bad_wr) = 0;
  // Returns how many completions were written to `wc` (0..num_entries).
  virtual absl::StatusOr<int> PollCq(ibv_cq* cq, int num_entries,
                                     ibv_wc* wc) = 0;

  // --- Shared receive queues (ibv_create_srq, ibv_modify_srq,
  //     ibv_destroy_srq, ibv_post_srq_recv) ---

  // An SRQ on `pd`; `init_attr->attr` holds what the device granted on
  // success. QPs created with `ibv_qp_init_attr::srq` set take their
  // receives from it, in the order posted, whichever QP a message arrives
  // on. Fails with EOPNOTSUPP (or ENOSYS) where the provider has none,
  // EINVAL for max_wr/max_sge above the device's max_srq_wr/max_srq_sge,
  // ENOMEM at max_srq.
  virtual absl::StatusOr<ibv_srq*> CreateSrq(ibv_pd* pd,
                                             ibv_srq_init_attr* init_attr) = 0;
  // `attr_mask` of ibv_srq_attr_mask: IBV_SRQ_LIMIT arms the limit event
  // (IBV_EVENT_SRQ_LIMIT_REACHED once fewer than srq_limit receives are
  // posted), IBV_SRQ_MAX_WR resizes where the device can.
  virtual absl::Status ModifySrq(ibv_srq* srq, ibv_srq_attr* attr,
                                 int attr_mask) = 0;
  // EBUSY while a QP is attached to it.
  virtual absl::Status DestroySrq(ibv_srq* srq) = 0;
  // Data path: allocation-free on success; `*bad_wr` as PostRecv.
  virtual absl::Status PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr,
                                   ibv_recv_wr** bad_wr) = 0;

  // --- Address handles (ibv_create_ah, ibv_destroy_ah) ---

  // The transport creates none for its RC traffic; it creates one from a
  // GID to itself to check that the GID can address packets at all (as UCX
  // does before it uses a RoCE GID). Fails with verbs' errno: EINVAL for a
  // bad attribute or an empty sgid_index, ENETUNREACH/EHOSTUNREACH (or
  // others) when the kernel cannot resolve the GID's route, EOPNOTSUPP where
  // the provider has no address handles (erdma).
  virtual absl::StatusOr<ibv_ah*> CreateAh(ibv_pd* pd, ibv_ah_attr* attr) = 0;
  virtual absl::Status DestroyAh(ibv_ah* ah) = 0;

  // --- Host settings outside verbs ---

  // The port's host-wide traffic-class file, which on mlx5 (MLNX_OFED's
  // mlx5_ib) overrides the traffic class of every QP at modify time:
  // /sys/class/infiniband/<device>/tc/<port>/traffic_class. `contents` is
  // the file's text ("Global tclass=106\n", or empty when no override is
  // set), nullopt when the file does not exist (upstream kernels, other
  // vendors). Fails only when the file exists but cannot be read (errno
  // text, e.g. EACCES). The backend reads; transport/traffic_class_file.h
  // parses.
  struct TrafficClassFile {
    std::string path;
    std::optional<std::string> contents;
  };
  virtual absl::StatusOr<TrafficClassFile> ReadTrafficClassFile(
      ibv_context* context, uint8_t port) = 0;

  // --- Asynchronous events (QP fatal, port changes, device fatal) ---

  // Blocks unless `context->async_fd` is non-blocking (then EAGAIN).
  virtual absl::Status GetAsyncEvent(ibv_context* context,
                                     ibv_async_event* event) = 0;
  virtual void AckAsyncEvent(ibv_async_event* event) = 0;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_VERBS_SHIM_VERBS_H_
