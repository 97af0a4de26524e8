// File: transport/connection_send_queue.cc
//
// Posting on the send queue: every chain through PostSendLocked() (a
// message through its inline twin, PostSendFastLocked() in
// connection_internal.h), which stamps sequence numbers and signalling
// (send_queue_ledger.h) and fails the connection when the post is refused
// (PostSendFailedLocked()). Also the control work requests
// (credit return, close, keepalive probe), waiting for a sequence, and
// quiescing the queue after a failure.

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "transport/connection.h"
#include "transport/connection_internal.h"
#include "verbs_shim/verbs_error.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport {

absl::Status Connection::PostSendLocked(ibv_send_wr* first, uint32_t count) {
  return PostSendFastLocked(first, count);
}

absl::Status Connection::PostSendFailedLocked(ibv_send_wr* first,
                                              const ibv_send_wr* bad,
                                              absl::Status status) {
  // Work requests before `bad` were posted; the connection is unusable now.
  uint32_t posted = 0;
  for (ibv_send_wr* wr = first; wr != nullptr && wr != bad; wr = wr->next) {
    ++posted;
  }
  sq_.Posted(posted);
  status = WithContext(
      status, absl::StrCat(name_, ": posting ", WrOpcodeName(first->opcode)));
  FailLocked(status);
  return status;
}

absl::StatusOr<uint64_t> Connection::PostControlLocked(WrKind kind,
                                                       uint32_t imm) {
  ibv_send_wr wr = {};
  ibv_sge sge = {};
  wr.wr_id = MakeWrId(kind, engine_slot_, 0);
  wr.num_sge = 0;
  // Nothing to fetch either way; marked inline only where the QP has inline
  // data at all.
  wr.send_flags = inline_.usable_inline > 0 ? IBV_SEND_INLINE : 0;
  static constexpr uint8_t kProbeByte = 1;
  switch (kind) {
    case WrKind::kSendCredit:
      wr.opcode = IBV_WR_SEND_WITH_IMM;
      wr.imm_data = htonl(imm);
      break;
    case WrKind::kClose:
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.imm_data = htonl(imm);
      wr.send_flags |= IBV_SEND_SIGNALED;
      break;
    default:  // keepalive / Check(): one byte into the peer's probe slot
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags |= IBV_SEND_SIGNALED;
      // Virtualised RDMA has been seen to drop zero-byte packets: a byte,
      // from the probe slot's own memory where inline is not available.
      if (peer_probe_.rkey != 0 && peer_probe_.length > 0) {
        const bool inline_byte = inline_.usable_inline > 0;
        sge.addr = inline_byte ? reinterpret_cast<uint64_t>(&kProbeByte)
                               : reinterpret_cast<uint64_t>(probe_slot_.data());
        sge.length = 1;
        sge.lkey = inline_byte ? 0 : probe_slot_.lkey();
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.wr.rdma.remote_addr = peer_probe_.address;
        wr.wr.rdma.rkey = peer_probe_.rkey;
      }
      break;
  }
  const uint64_t seq = sq_.posted();
  if (absl::Status status = PostSendLocked(&wr, 1); !status.ok()) {
    return status;
  }
  return seq;
}

void Connection::QuiesceLocked(std::unique_lock<ConnectionLock>& lock) {
  if (inline_.qp == nullptr || sq_.Idle()) return;
  // Flush whatever is still queued, then wait until the NIC has given every
  // work request back.
  (void)ModifyQpToError(verbs_, inline_.qp);
  const Deadline give_up = env_.DeadlineIn(kFlushWait);
  while (!sq_.Idle()) {
    const uint64_t token = env_.PrepareWait();
    if (PollOnceLocked(lock)) continue;
    if (env_.Now() >= give_up) break;
    SleepLocked(lock, token, std::min(give_up, env_.Now() + kFollowerWait),
                options_.progress == ProgressMode::kBusyPoll || engine_
                    ? WaitKind::kSpin
                    : WaitKind::kBlock);
  }
  if (!sq_.Idle()) {
    // The provider did not flush in time: destroying the QP is what
    // guarantees the NIC no longer touches the memory.
    std::fprintf(
        stderr,
        "rdma_transport: %s: %llu work request(s) not flushed within "
        "%lld ms of the failure; destroying the QP\n",
        name_.c_str(),
        static_cast<unsigned long long>(sq_.posted() - sq_.completed()),
        static_cast<long long>(kFlushWait.count()));
    context_.UnregisterListener(this);
    registered_ = false;
    (void)verbs_.DestroyQp(inline_.qp);
    inline_.qp = nullptr;
    sq_.CompleteAll();
    if (async_.count > 0) EndAllAsyncOpsLocked(failure_);
  }
}

}  // namespace rdma_transport
