// File: transport/connection.h
//
// `Connection`: one reliable-connected QP to a peer, with whole-message
// SEND/RECEIVE under credit-based flow control, one-sided RDMA WRITE/READ,
// a liveness check and a graceful close. Made by Connect() or
// Listener::Accept() (listener.h).
//
//   absl::Status sent = connection->Send(bytes);
//   absl::StatusOr<size_t> n = connection->Receive(buffer, DeadlineIn(1s));
//   absl::Status written = connection->Write({{&local, 0, 4096, remote, 0}});
//   absl::Status closed = connection->Close(DeadlineIn(1s));
//
// Messaging. Each side keeps `recv_slots` receives posted into a registered
// receive ring of `max_message_size`-byte slots, and a send ring as large.
// A message travels as one SEND_WITH_IMM: from the caller's buffer with
// IBV_SEND_INLINE when it fits the QP's usable inline size (inline_size.h),
// else copied into a send slot first. Credits (credits.h) guarantee a posted
// receive for every message, so the peer never sees an RNR. A message longer
// than the peer's slot is refused with kInvalidArgument (large payloads go by
// Write()). Receive copies one whole message out and reposts its slot.
//
// One-sided. Write()/Read() post chains of at most `max_rdma_batch` work
// requests with only the last signalled, wait for that completion, and go
// on; at most one batch is outstanding. An op longer than the port's
// max_msg_sz (8 MiB on rxe) is split into several work requests. Each remote
// range is checked against its RemoteRegion before anything is posted, each
// local range against its MemoryRegion (Read needs kLocalWrite on it).
//
// Progress. kBusyPoll spins on the completion queue (lowest latency);
// kEvent sleeps on a completion channel whose fd (event_fd()) may also be put
// in the caller's epoll/poll set: when it is readable, call Receive() with a
// deadline of now.
//
// Liveness and close. Check() sends a zero-byte inline RDMA WRITE and
// reports a dead peer; a Receive() idle for `keepalive_interval` does the
// same, so a vanished peer ends every wait with kUnavailable instead of a
// hang. A peer is also declared gone when a signalled work request sees no
// completion for `completion_timeout`, for providers that never report it.
// Close() sends a zero-byte WRITE_WITH_IMM "close" after everything already
// posted, waits for it, and releases the QP, CQ and rings. A peer's close lets
// Receive() return the messages that arrived before it, then kUnavailable.
//
// Errors. The first failed completion is turned into a Status naming the
// connection, the operation and the ibv_wc status (kUnavailable when the
// peer is unreachable or gone, kPermissionDenied for protection/access
// errors, kInvalidArgument for length errors, kInternal otherwise); from then
// on every call returns that same Status.
//
// Thread-safety. One thread may call Receive() while another calls Send(),
// Write(), Read(), Check() or Close(); calls within each of those two groups
// must be serialised by the caller. stats(), status() and the accessors may
// be called from any thread. Close() may run while another thread waits in
// Receive(), which then returns kFailedPrecondition.
//
// Ownership. The Connection owns its QP, CQ, completion channel and rings,
// and must be destroyed (or closed) before its Context. Destroying an open
// connection closes it without waiting.

#ifndef RDMA_TRANSPORT_TRANSPORT_CONNECTION_H_
#define RDMA_TRANSPORT_TRANSPORT_CONNECTION_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/context.h"
#include "transport/credits.h"
#include "transport/deadline.h"
#include "transport/memory_region.h"

namespace rdma_transport {

enum class ProgressMode { kBusyPoll, kEvent };

struct ConnectionOptions {
  // Receives kept posted, i.e. the credits the peer starts with (>= 2).
  uint32_t recv_slots = 64;
  // Messages in flight before Send() waits for completions.
  uint32_t send_slots = 64;
  // Largest message this side receives (the slot size) and sends.
  uint32_t max_message_size = 4096;
  // Work requests per post in Write()/Read().
  uint32_t max_rdma_batch = 32;
  // Credits owed before they go back in a message of their own; 0: half of
  // recv_slots.
  uint32_t credit_batch = 0;
  ProgressMode progress = ProgressMode::kBusyPoll;
  // The whole TCP handshake must finish within this.
  std::chrono::milliseconds handshake_timeout{5000};
  // A Receive() idle this long probes the peer; 0 disables.
  std::chrono::milliseconds keepalive_interval{1000};
  // A signalled work request outstanding this long with no completion at
  // all means the peer is gone, whatever the provider says; 0: four times
  // the QP's retry budget (4.096 us * 2^timeout * (retry_cnt + 1)), at least
  // 2 s. Soft-RoCE in Linux 6.1 retransmits forever to a dead peer instead
  // of completing with IBV_WC_RETRY_EXC_ERR; this bounds every wait anyway.
  std::chrono::milliseconds completion_timeout{0};
  // Shared secret: a server with a token rejects clients without the same.
  std::string token;
  // For error messages; the setup code fills in the addresses when empty.
  std::string name;
};

struct ConnectionStats {
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t inline_sends = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t credit_messages_sent = 0;
  uint64_t credit_messages_received = 0;
  uint64_t rdma_writes = 0;  // RdmaOps completed, not work requests
  uint64_t rdma_reads = 0;
  uint64_t rdma_bytes = 0;
  uint64_t keepalives = 0;
  uint32_t send_credits = 0;
};

// One one-sided transfer: `length` bytes between local[local_offset...] and
// the peer's remote[remote_offset...].
struct RdmaOp {
  const MemoryRegion* local = nullptr;
  size_t local_offset = 0;
  size_t length = 0;
  RemoteRegion remote;
  uint64_t remote_offset = 0;
};

class Connection {
 public:
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  // Sends one whole message (0..max_message_size() bytes). Waits for a credit
  // and a send slot until `deadline` (kDeadlineExceeded: nothing was sent).
  absl::Status Send(std::span<const std::byte> message,
                    Deadline deadline = kNoDeadline);
  // Receives one whole message into `buffer`; returns its length. A buffer
  // smaller than the message fails with kInvalidArgument and the message
  // stays queued. kDeadlineExceeded when none arrives in time.
  absl::StatusOr<size_t> Receive(std::span<std::byte> buffer,
                                 Deadline deadline = kNoDeadline);

  // One-sided transfers; return when all have completed. Bounded by the
  // QP's retry budget, not by a deadline: the NIC may still be using the
  // memory until then.
  absl::Status Write(std::span<const RdmaOp> ops);
  absl::Status Read(std::span<const RdmaOp> ops);

  // Probes the peer with a zero-byte RDMA WRITE; kUnavailable when it is gone.
  absl::Status Check(Deadline deadline = kNoDeadline);

  // Tells the peer, drains, releases everything. Idempotent.
  absl::Status Close(Deadline deadline = kNoDeadline);

  // OK while the connection is usable; else why not.
  absl::Status status() const;
  ConnectionStats stats() const;

  const std::string& name() const { return name_; }
  // Largest message Send() accepts: the smaller of this side's
  // max_message_size and the peer's slot size.
  uint32_t max_message_size() const { return send_limit_; }
  uint32_t usable_inline() const { return inline_.usable_inline; }
  const NegotiatedQp& negotiated_qp() const { return inline_; }
  // The completion channel's fd in kEvent mode, else -1.
  int event_fd() const;
  // The QP, for inspection (Verbs::QueryQp) only.
  ibv_qp* qp() const { return inline_.qp; }
  const Context& context() const { return context_; }

 private:
  friend class ConnectionSetup;

  // Work request ids: kind in the top byte, a sequence or slot below.
  enum class WrKind : uint8_t {
    kRecv = 1,
    kSendData,
    kSendCredit,
    kClose,
    kWrite,
    kRead,
    kKeepalive,
  };

  Connection(const Context& context, const ConnectionOptions& options,
             std::string name);

  // Setup, used by ConnectionSetup (listener.cc).
  absl::Status CreateResources();
  QpEndpoint LocalEndpoint() const;
  absl::Status Establish(const QpEndpoint& remote, uint32_t peer_recv_slots,
                         uint32_t peer_slot_size);

  // All below run with mu_ held.
  absl::Status UsableLocked() const;
  bool PollOnceLocked(std::unique_lock<std::mutex>& lock);
  void HandleCompletionLocked(const ibv_wc& wc);
  void FailLocked(absl::Status status);
  // Waits for progress (kBusyPoll: spins; kEvent: sleeps on the channel).
  // kDeadlineExceeded once `deadline` has passed.
  // `idle_receive`: a Receive with nothing to take, which probes the peer
  // every keepalive_interval.
  absl::Status WaitLocked(std::unique_lock<std::mutex>& lock, Deadline deadline,
                          bool idle_receive = false);
  // Moves last_activity_ to `now` if anything completed since last looked.
  void NoteActivityLocked(Clock::time_point now);
  // Posts a keepalive probe when the connection has been idle long enough.
  bool MaybeKeepaliveLocked(Clock::time_point now);
  // Takes and acknowledges every completion event on the channel (kEvent).
  void DrainChannelLocked();
  // Fails the connection when a signalled work request has waited longer
  // than completion_timeout_ with no send completion at all.
  void CheckStalledLocked(Clock::time_point now);
  bool SqHasRoomLocked(uint32_t wrs) const {
    return sq_posted_ - sq_completed_ + wrs <= sq_depth_;
  }
  absl::Status PostSendLocked(ibv_send_wr* first, uint32_t count);
  // A zero-length control work request (credit return, close, keepalive);
  // returns its sequence number.
  absl::StatusOr<uint64_t> PostControlLocked(WrKind kind, uint32_t imm);
  absl::Status RepostLocked(uint32_t slot);
  void MaybeReturnCreditsLocked();
  // Polls and waits until `ready()` holds. The connection's failure if one
  // comes first; kDeadlineExceeded "<name>: <waiting_for> before the
  // deadline" at the deadline. Every wait of the connection goes through it.
  // (Defined in connection.cc, where every caller is.)
  template <typename Ready>
  absl::Status WaitUntilLocked(std::unique_lock<std::mutex>& lock,
                               Deadline deadline, Ready ready,
                               const char* waiting_for);
  absl::Status PeerClosedError() const;
  absl::Status WaitForSeqLocked(std::unique_lock<std::mutex>& lock,
                                uint64_t seq, Deadline deadline);
  absl::Status RdmaLocked(std::unique_lock<std::mutex>& lock,
                          std::span<const RdmaOp> ops, bool is_write);
  absl::Status CheckRdmaOps(std::span<const RdmaOp> ops, bool is_write) const;
  void TearDownLocked();

  static uint64_t MakeWrId(WrKind kind, uint64_t value) {
    return (static_cast<uint64_t>(kind) << 56) | (value & ((1ull << 56) - 1));
  }

  const Context& context_;
  Verbs& verbs_;
  const ConnectionOptions options_;
  std::string name_;  // set by the setup code, fixed once established

  // Verbs resources.
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  NegotiatedQp inline_;
  struct FreeDeleter {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, FreeDeleter> send_buffer_;
  std::unique_ptr<std::byte, FreeDeleter> recv_buffer_;
  MemoryRegion send_ring_;
  MemoryRegion recv_ring_;
  int wakeup_fd_ = -1;  // kEvent: wakes a waiter blocked in poll(2)

  // Takes mu_, counted in entering_ while waiting for it, so that a busy
  // poller holding it knows whether anybody wants it.
  std::unique_lock<std::mutex> Enter() const;

  mutable std::mutex mu_;
  mutable std::atomic<int> entering_{0};
  std::condition_variable cv_;

  // Send queue accounting: sequence numbers of posted work requests; a
  // signalled completion of sequence s completes everything up to s (RC
  // completes in order).
  uint32_t sq_depth_ = 0;
  uint32_t signal_interval_ = 1;
  uint64_t sq_posted_ = 0;
  uint64_t sq_completed_ = 0;
  // Unsignalled work requests posted since the last signalled one; kept
  // below signal_interval_ so a completion always comes to free resources.
  uint32_t unsignaled_run_ = 0;
  // One past the sequence of the last signalled work request, and when the
  // send queue last made progress (or became busy): the watchdog's inputs.
  uint64_t signaled_end_ = 0;
  Clock::time_point send_progress_time_;
  uint64_t watchdog_seen_ = ~uint64_t{0};  // sq_completed_ when last looked
  Clock::duration completion_timeout_{};
  // Completions seen, and the count when last_activity_ was last moved: the
  // clock is read only when somebody waits, not per completion.
  uint64_t completions_ = 0;
  uint64_t activity_seen_ = 0;
  uint32_t spin_turns_ = 0;
  // Send slots are used round robin; each remembers the sequence of the
  // send that used it, and is free once that sequence has completed.
  std::vector<uint64_t> send_slot_seq_;
  uint32_t next_send_slot_ = 0;
  uint32_t send_limit_ = 0;

  SendCredits send_credits_;
  OwedCredits owed_credits_;

  // Received data messages not yet taken by Receive(): (slot, length).
  std::vector<std::pair<uint32_t, uint32_t>> arrived_;
  size_t arrived_head_ = 0;
  size_t arrived_count_ = 0;

  absl::Status failure_;
  bool established_ = false;
  bool peer_closed_ = false;
  bool closing_ = false;
  bool closed_ = false;
  bool keepalive_outstanding_ = false;
  uint32_t psn_ = 0;
  int active_calls_ = 0;       // calls inside the connection (for Close)
  bool event_waiter_ = false;  // a thread is blocked on the channel fd
  Clock::time_point last_activity_;

  // Work requests and gather entries of one Write()/Read() batch,
  // allocated once.
  std::vector<ibv_send_wr> rdma_wrs_;
  std::vector<ibv_sge> rdma_sges_;
  uint32_t slot_size_ = 0;

  ConnectionStats stats_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_CONNECTION_H_
