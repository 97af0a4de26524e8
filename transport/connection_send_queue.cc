// File: transport/connection_send_queue.cc
//
// Send-queue accounting and selective signalling: every posted work request
// gets a sequence number in its wr_id (wr_id.h); at most signal_interval_ - 1
// in a row go unsignalled, and a signalled completion of sequence s frees
// everything up to s (RC completes in order). Also the control work requests
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
  ibv_send_wr* wr = first;
  for (uint32_t i = 0; i < count; ++i, wr = wr->next) {
    const uint64_t seq = sq_posted_ + i;
    wr->wr_id = WithWrIdValue(wr->wr_id, seq);
    if (!(wr->send_flags & IBV_SEND_SIGNALED) &&
        unsignaled_run_ + 1 >= signal_interval_) {
      wr->send_flags |= IBV_SEND_SIGNALED;
    }
    if (wr->send_flags & IBV_SEND_SIGNALED) {
      unsignaled_run_ = 0;
      signaled_end_ = seq + 1;
    } else {
      ++unsignaled_run_;
    }
    for (int i = 0; i < wr->num_sge; ++i) {
      sq_bytes_posted_ += wr->sg_list[i].length;
    }
    sq_bytes_[seq % sq_depth_] = sq_bytes_posted_;
  }
  ibv_send_wr* bad = nullptr;
  absl::Status status = verbs_.PostSend(inline_.qp, first, &bad);
  if (status.ok()) [[likely]] {
    sq_posted_ += count;
    return status;
  }
  // Work requests before `bad` were posted; the connection is unusable now.
  for (wr = first; wr != nullptr && wr != bad; wr = wr->next) ++sq_posted_;
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
  const uint64_t seq = sq_posted_;
  if (absl::Status status = PostSendLocked(&wr, 1); !status.ok()) {
    return status;
  }
  return seq;
}

absl::Status Connection::WaitForSeqLocked(std::unique_lock<std::mutex>& lock,
                                          uint64_t seq, Deadline deadline) {
  return WaitUntilLocked(
      lock, deadline, [&] { return sq_completed_ > seq; },
      "work request not completed");
}

void Connection::QuiesceLocked(std::unique_lock<std::mutex>& lock) {
  if (inline_.qp == nullptr || sq_completed_ >= sq_posted_) return;
  // Flush whatever is still queued, then wait until the NIC has given every
  // work request back.
  (void)ModifyQpToError(verbs_, inline_.qp);
  const Deadline give_up = env_.DeadlineIn(kFlushWait);
  while (sq_completed_ < sq_posted_) {
    const uint64_t token = env_.PrepareWait();
    if (PollOnceLocked(lock)) continue;
    if (env_.Now() >= give_up) break;
    SleepLocked(lock, token, std::min(give_up, env_.Now() + kFollowerWait),
                options_.progress == ProgressMode::kBusyPoll || engine_
                    ? WaitKind::kSpin
                    : WaitKind::kBlock);
  }
  if (sq_completed_ < sq_posted_) {
    // The provider did not flush in time: destroying the QP is what
    // guarantees the NIC no longer touches the memory.
    std::fprintf(stderr,
                 "rdma_transport: %s: %llu work request(s) not flushed within "
                 "%lld ms of the failure; destroying the QP\n",
                 name_.c_str(),
                 static_cast<unsigned long long>(sq_posted_ - sq_completed_),
                 static_cast<long long>(kFlushWait.count()));
    context_.UnregisterListener(this);
    registered_ = false;
    (void)verbs_.DestroyQp(inline_.qp);
    inline_.qp = nullptr;
    sq_completed_ = sq_posted_;
    if (async_count_ > 0) EndAllAsyncOpsLocked(failure_);
  }
}

}  // namespace rdma_transport
