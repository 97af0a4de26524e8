// File: tests/swallow_send_completions.h
//
// `SwallowSendCompletions` is a Verbs wrapper (LevelDB's SpecialEnv, for
// verbs) that drops every send-side completion while `swallow` is set: a
// provider that never completes a request to a dead peer, as Soft-RoCE does
// (Linux 6.1, 6.12 and 7.2 retransmit forever; docs/soft-roce.md). Receive
// completions pass. Test-only; `swallow` may be flipped from any thread.
//
//   SwallowSendCompletions verbs(&sim_verbs);
//   verbs.swallow = true;  // from now on no send completes

#ifndef RDMA_TRANSPORT_TESTS_SWALLOW_SEND_COMPLETIONS_H_
#define RDMA_TRANSPORT_TESTS_SWALLOW_SEND_COMPLETIONS_H_

#include <atomic>

#include "verbs_shim/verbs_wrapper.h"

namespace rdma_transport {

class SwallowSendCompletions : public VerbsWrapper {
 public:
  using VerbsWrapper::VerbsWrapper;
  std::atomic<bool> swallow{false};

  absl::StatusOr<int> PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) override {
    absl::StatusOr<int> polled = target()->PollCq(cq, num_entries, wc);
    if (!polled.ok() || !swallow.load()) return polled;
    int kept = 0;
    for (int i = 0; i < *polled; ++i) {
      if (wc[i].opcode & IBV_WC_RECV) wc[kept++] = wc[i];
    }
    return kept;
  }
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_SWALLOW_SEND_COMPLETIONS_H_
