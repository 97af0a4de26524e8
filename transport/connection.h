// File: transport/connection.h
//
// `Connection`: one reliable-connected QP to a peer, with whole-message
// SEND/RECEIVE under credit-based flow control, one-sided RDMA WRITE/READ,
// a liveness check and a graceful close. Made by Connect() (connect.h) or
// Listener::Accept() (listener.h).
//
//   Env& env = connection->env();  // the Context's clock: real or simulated
//   absl::Status sent = connection->Send(bytes);
//   absl::StatusOr<size_t> n = connection->Receive(buffer, env.DeadlineIn(1s));
//   const RdmaOp op{&local, 0, 4096, remote, 0};  // local -> the peer's region
//   absl::Status written = connection->Write({&op, 1});
//   absl::Status closed = connection->Close(env.DeadlineIn(1s));
//
// Messaging. Each side keeps `recv_slots` receives posted into a registered
// receive ring of `max_message_size`-byte slots, and a send ring as large
// (on an engine with a shared receive queue, it reserves `recv_slots` slots
// of the engine's pool instead and has no receive ring: engine.h).
// A message travels as one SEND_WITH_IMM: from the caller's buffer with
// IBV_SEND_INLINE when it fits the QP's usable inline size (inline_size.h),
// else copied into a send slot first. Credits (credits.h) guarantee a posted
// receive for every message, so the peer never sees an RNR. Receive copies
// one whole message out and reposts its slot.
//
// Zero copy. SendFrom() sends a range of a registered MemoryRegion by
// scatter/gather from it (no copy; inline when it fits; copied into a send
// slot up to 1 KiB, which measured cheaper than waiting for the NIC) and
// returns when the NIC is done with it; PostSendFrom(), on a connection with
// an engine, posts the same message without waiting and reports when the
// memory may be reused in the engine's NextCompletion(), so a sender keeps
// a window of messages in flight. ReceiveBorrowed() hands out the receive
// slot itself as a ReceivedMessage (received_message.h): the slot, and its
// credit, go back when the view is released. ReceiveInto() receives into a
// range of a registered region (a rendezvous message lands there with no copy).
//
// Rendezvous. A message larger than the peer's slot (or than
// ConnectionOptions::rendezvous_threshold, for SendFrom()) travels by
// rendezvous when both sides offered it (ConnectionOptions::rendezvous,
// path().rendezvous): the sender posts a request naming its registered
// memory (rendezvous_request.h) in the same order as every other message;
// the receiver, once the request reaches the head of its queue and a
// Receive()/ReceiveInto() provides memory of the message's size, RDMA
// READs the message into it (pieces cut as Read() cuts them) and reports
// it read in the "finished" count of its next immediate (a credit message
// of its own if nothing else goes); the sender's call returns then. Messages
// keep one order per connection: those behind a rendezvous wait for it.
// Send() registers the caller's buffer for the transfer (kRemoteRead) and
// Receive() the caller's buffer (kLocalWrite); SendFrom()/ReceiveInto()
// use the caller's regions. Memory is bounded: a request waits in its
// receive slot (one credit) until the receiver provides memory, so a
// receiver that takes nothing holds back the sender, never buffers. A
// sender waiting for its message to be read notices the peer's death as
// every wait does; a deadline that passes after the request went out fails
// the connection (the peer may still read the memory), with kDeadlineExceeded.
// Without rendezvous (either side), a message larger than the peer's slot
// is refused with kInvalidArgument.
//
// One-sided. Write()/Read() (and a rendezvous message's READ) keep a
// pipeline of pieces on the send queue: at most `max_rdma_batch` work
// requests of the call outstanding, posted in chains, each chain's last
// signalled and at least one every kProgressSignalBytes; as completions come,
// the next pieces go out, and the call returns when the last has completed.
// An op longer than the port's max_msg_sz (8 MiB on rxe) is split into
// several work requests. Under a cap on bytes in flight (on Soft-RoCE
// 256 KiB: its READ responder overflows a loaded host's veth queue and Linux
// 6.1's rxe then never completes the READ; or rdma_in_flight_bytes) the
// send queue's signalled bytes outstanding never exceed it: pieces are a
// quarter of the cap (kRdmaPiecesUnderCap; 64 KiB on rxe), each signalled,
// so several are on the wire and the next is posted as the oldest completes.
// Each remote range is checked against its RemoteRegion before anything is
// posted, each local range against its MemoryRegion (Read needs kLocalWrite
// on it).
//
// Progress. kBusyPoll spins on the completion queue, polling again at once
// after an empty poll, with no PAUSE unless another thread waits for the
// connection's lock (lowest latency; on the real clock it looks at the clock,
// the setup stream and async events every 0.2 ms at first, then up to every
// 13 ms while those looks find nothing, as its deadline and timers fall due by
// the cycle counter, and for a while after the thread was descheduled it
// yields the CPU every 0.2 ms, looking at the fds only on their own
// interval: busy_poll_gate.h. A spinning wait under steady traffic on a CPU
// of its own makes one system call per thousands of messages); kEvent sleeps
// on a completion channel. Every wait goes through the Context's Env
// (verbs_shim/env.h): the real clock on real devices, the fabric's virtual
// clock on the simulator, where a wait for a deadline advances the fabric
// instead of sleeping.
//
// Readiness (kEvent). event_fd() is readable exactly while a message waits
// for Receive(), the connection has failed, or the peer has closed it, with
// at most a spurious wakeup after a completion that was not a message: put
// it in an epoll/poll set and call Receive() with a deadline of now when it
// is readable. Whichever thread takes a message off the completion queue
// (one waiting in Send(), say), the fd tells, and the completion queue is
// re-armed before any call returns, so no message sits unseen.
//
// Not waiting. A receive given kNoWait (verbs_shim/env.h) takes a message
// that is there and otherwise returns kDeadlineExceeded at once: it never
// yields the CPU, sleeps, reads a clock or makes a system call. A
// connection of its own first polls its completion queue (ibv_poll_cq, no
// system call on any provider we run); on an engine the engine's Progress()
// brings messages in, and a kNoWait receive only takes what it brought
// (ReadyConnection() says where). A receive given a deadline of now also
// gives up at once, but looks at the clock, the setup stream and the
// device's events first, as every wait does.
//
//   absl::StatusOr<size_t> n = connection->Receive(buffer, kNoWait);
//   if (absl::IsDeadlineExceeded(n.status())) {
//     // nothing there; n.ok(): *n bytes received
//   }
//
// Memory for one peer. BindRegion() opens a range of a region registered
// with kBindable to this connection's peer only (peer_region.h): one type 2
// memory window and one signalled IBV_WR_BIND_MW on this send queue per
// binding. Another connection's WRITE/READ with its rkey fails with
// IBV_WC_REM_ACCESS_ERR. Close() and the destructor deallocate every window
// still bound before destroying the QP.
//
// Liveness. A peer is noticed gone in every wait, not only by Receive():
//   - its process exited: the setup stream (kept open for the connection's
//     life) reads EOF without the goodbye byte Close() sends - at once, with
//     no timer;
//   - its host vanished or its NIC died: any wait (Send for credit, Close,
//     Write/Read, Check, Receive) idle for `keepalive_interval` posts a
//     one-byte RDMA WRITE probe into the peer's probe slot, which fails after
//     the QP's retry budget (4.096 us * 2^MC_IB_TIMEOUT * (MC_IB_RETRY_CNT+1));
//   - an asynchronous event names the QP, its CQ, the port or the device
//     (Context::PollAsyncEvents): at once;
//   - for providers that never complete a work request to a dead peer
//     (Soft-RoCE on Linux 6.1 retransmits forever), a completion watchdog:
//     armed on rxe only (or by `completion_timeout` > 0), it fails the
//     connection when the send queue makes no progress for
//     completion_timeout + bytes outstanding / kWatchdogFloorBytesPerSecond.
//     Large Write()/Read() batches signal every kProgressSignalBytes, so a
//     slow but healthy transfer always shows progress.
// After a failure no call returns while the NIC may still touch the caller's
// memory: outstanding work is flushed (QP to ERR, flush completions seen) or,
// if the flush does not come within kFlushWait, the QP is destroyed.
// Close() sends a one-byte "goodbye" on the setup stream, then a zero-byte
// WRITE_WITH_IMM "close" (its immediate carries it) after everything already
// posted, waits for it, and releases the QP, CQ and rings. A peer's close lets
// Receive() return the messages that arrived before it, then kUnavailable.
// Credits: data keeps two credits in reserve, a credit return one, so the
// close message always has a credit of its own.
//
// Errors. The first failed completion is turned into a Status naming the
// connection, the operation and the ibv_wc status (kUnavailable when the
// peer is unreachable or gone, kPermissionDenied for protection/access
// errors, kInvalidArgument for length errors, kInternal otherwise); from then
// on every call returns that same Status.
//
// Thread-safety. One thread may call Receive() while another calls Send(),
// Write(), Read(), BindRegion(), Check() or Close(); calls within each of those
// two groups must be serialised by the caller. stats(), status() and the
// accessors may be called from any thread. Close() may run while another thread
// waits in Receive(), which then returns kFailedPrecondition. A connection with
// an engine is the exception: every call other than stats(), status() and the
// accessors is made on the engine's thread, one at a time (engine.h).
// With ConnectionOptions::thread_mode = ThreadMode::kSerialized the caller
// promises more: no two calls overlap at all (stats(), status(), Close()
// and its views' Release() included), and the connection's lock then costs
// no atomic instruction (connection_lock.h); two calls caught overlapping
// abort the process. A thread may hand the connection to another with its
// own synchronisation (a mutex, a queue, a join).
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
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/aligned_buffer.h"
#include "transport/async_op.h"
#include "transport/busy_poll_gate.h"
#include "transport/connection_lock.h"
#include "transport/connection_options.h"
#include "transport/context.h"
#include "transport/credits.h"
#include "transport/deadline.h"
#include "transport/engine.h"
#include "transport/immediate_data.h"
#include "transport/memory_region.h"
#include "transport/negotiation.h"
#include "transport/peer_region.h"
#include "transport/rdma_chain.h"
#include "transport/rdma_pipeline.h"
#include "transport/receive_reposts.h"
#include "transport/received_message.h"
#include "transport/send_queue_ledger.h"
#include "transport/tcp.h"
#include "transport/wr_id.h"
#include "verbs_shim/env.h"

namespace rdma_transport {

class Connection final : private AsyncEventListener {
 public:
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  // What a connection made with `options` keeps (see ConnectionFootprint);
  // `engine`: the options of options.engine, nullptr without one.
  static ConnectionFootprint Footprint(const ConnectionOptions& options,
                                       const EngineOptions* engine);

  // Sends one whole message (0..max_message_size() bytes). Waits for a credit
  // and a send slot until `deadline` (kDeadlineExceeded: nothing was sent).
  absl::Status Send(std::span<const std::byte> message,
                    Deadline deadline = kNoDeadline);
  // Receives one whole message into `buffer`; returns its length. A buffer
  // smaller than the message fails with kInvalidArgument and the message
  // stays queued. kDeadlineExceeded when none arrives in time.
  absl::StatusOr<size_t> Receive(std::span<std::byte> buffer,
                                 Deadline deadline = kNoDeadline);

  // Sends [offset, offset + length) of `region` with no copy (see above,
  // "Zero copy" and "Rendezvous"); returns when the memory may be reused.
  // Rendezvous needs kRemoteRead on the region (kFailedPrecondition
  // without). kOutOfRange for a range outside the region; the waits and
  // errors of Send() otherwise.
  //
  //   absl::Status sent = connection->SendFrom(region, 0, region.size());
  absl::Status SendFrom(const MemoryRegion& region, size_t offset,
                        size_t length, Deadline deadline = kNoDeadline);
  // Receives the next message into [offset, offset + capacity) of `region`
  // (kLocalWrite needed for a rendezvous message: kPermissionDenied, and the
  // message stays queued); returns its length. As Receive() otherwise.
  absl::StatusOr<size_t> ReceiveInto(const MemoryRegion& region, size_t offset,
                                     size_t capacity,
                                     Deadline deadline = kNoDeadline);
  // Receives the next message in place (received_message.h). A message that
  // came by rendezvous has no slot to lend: kFailedPrecondition naming its
  // size, and it stays queued for Receive()/ReceiveInto().
  absl::StatusOr<ReceivedMessage> ReceiveBorrowed(
      Deadline deadline = kNoDeadline);
  // The same into `message`, which first gives back the slot it holds, in
  // this one call (one lock taken for both: a receive loop that keeps one
  // view at a time pays no call of its own for the release). A view of
  // another connection is released as Release() does. On an error the old
  // view is released all the same and `message` holds nothing.
  //
  //   ReceivedMessage message;
  //   while (connection->ReceiveBorrowed(&message).ok()) Consume(message.data());
  absl::Status ReceiveBorrowed(ReceivedMessage* message,
                               Deadline deadline = kNoDeadline);
  // Waits for the next message and returns its length without taking it
  // (to size a buffer for a rendezvous message, say).
  absl::StatusOr<size_t> NextMessageSize(Deadline deadline = kNoDeadline);

  // One-sided transfers; return when all have completed. Bounded by the
  // QP's retry budget, not by a deadline: the NIC may still be using the
  // memory until then.
  absl::Status Write(std::span<const RdmaOp> ops);
  absl::Status Read(std::span<const RdmaOp> ops);

  // Asynchronous one-sided transfers, on a connection with an engine
  // (ConnectionOptions::engine). Checks every op as Write()/Read() do, posts
  // them all at once (each op's last work request signalled) and returns
  // the handle of the first; op i is handle + i, and each ends once in the
  // engine's NextCompletion() (engine.h: COMPLETED, FAILED, OUTCOME_UNKNOWN),
  // in order. Never waits. All or nothing: kResourceExhausted when the send
  // queue (less two entries kept for control messages), the connection's
  // operation slots (one per send queue entry) or the engine's max_async_ops
  // have no room for the whole batch now - drive the engine and post again;
  // kFailedPrecondition without an engine; the errors of Write()/Read()
  // for bad ops; the connection's failure once it has failed. The memory
  // must stay registered and untouched (READ targets: unread) until the
  // op's completion is taken. Pieces are cut as Write()'s: as long as the
  // port and the watchdog allow, and under a cap on bytes in flight a
  // quarter of the cap (64 KiB on rxe). One op of more work requests than
  // the send queue can hold (a 64 MiB op on rxe: 1,024 pieces) is accepted
  // when no other op waits to be posted, and goes out piece by piece; a
  // batch of several ops that large is refused (kResourceExhausted saying
  // so): post fewer at a time.
  //
  // Bytes in flight. On Soft-RoCE at most kSoftRoceInFlightBytes (or
  // ConnectionOptions::rdma_in_flight_bytes, on any device) of the
  // send queue's bytes are in flight, as for Write()/Read() (see above):
  // an accepted op whose pieces would go past that waits in the connection,
  // and its pieces are posted, in order, as completions of earlier ones are
  // dispatched by the engine. Accepting is unchanged (the room counted is
  // for queued ops too), so a caller keeps a window of ops outstanding with
  // no rxe-specific code and never sees a refusal for bytes: the cap only
  // sets how much of the window the NIC holds at once. Other devices get
  // every piece posted at once. While anything waits, the last work request
  // of every post is signalled, so a completion always comes to post more.
  // Close() posts its close message after every queued piece; a connection
  // that fails ends the ops none of whose pieces went out FAILED.
  //
  //   absl::StatusOr<OpHandle> first = connection->PostWrite(window);
  //   // ... engine->Progress() / Wait(); NextCompletion() as each ends
  //
  // An op of the batch not ended by `deadline` (Env clock) fails the
  // connection with kDeadlineExceeded (engine.h, "Deadlines").
  absl::StatusOr<OpHandle> PostWrite(std::span<const RdmaOp> ops,
                                     Deadline deadline = kNoDeadline);
  absl::StatusOr<OpHandle> PostRead(std::span<const RdmaOp> ops,
                                    Deadline deadline = kNoDeadline);

  // Asynchronous zero-copy send, on a connection with an engine: the
  // message SendFrom() sends (the same SEND_WITH_IMM, in the same order as
  // every Send()/SendFrom() of the connection, carrying the credits owed),
  // posted at once and never waited for. Inline when it fits the usable
  // inline size, else by scatter/gather from the region - no copy, not
  // even below SendFrom()'s 1 KiB (that copy only saved a wait, and an
  // asynchronous send never waits); its work request is signalled. Returns
  // the op's handle, which ends once in the engine's NextCompletion()
  // (Completion::is_send): COMPLETED when the NIC is done with the memory
  // (the send's completion), FAILED / OUTCOME_UNKNOWN as a WRITE's when the
  // connection fails first (a SEND posted and not completed:
  // OUTCOME_UNKNOWN). Ops of a connection end in posting order, WRITEs and
  // READs included. The range must stay registered and untouched until then.
  // On the wire it goes after every op posted before it, as RC orders a
  // send queue: while one-sided ops wait for Soft-RoCE's in-flight cap (see
  // PostWrite()), PostSendFrom() is refused (kResourceExhausted) and
  // Send()/SendFrom() wait, so a message that follows WRITEs reaches the
  // peer after their bytes have landed, on every device.
  //
  // A message longer than rendezvous_threshold() goes by rendezvous when
  // path().rendezvous (kRemoteRead needed on the region, else
  // kFailedPrecondition): its request goes out in order as above, and the
  // op ends COMPLETED when the peer reports the message read - not at the
  // request's completion - so ops posted after it end after it too. A peer
  // that closes with it unread fails the connection (kUnavailable), and
  // Close() waits (up to its deadline) until the peer has read every one.
  //
  // Never waits: kResourceExhausted, with nothing posted, when there is no
  // send credit (the peer has not returned them: it is not receiving),
  // one-sided ops ahead of it held by the in-flight cap, no send-queue room
  // (two entries kept for control messages), no op slot
  // (the connection's, one per send-queue entry, or the engine's
  // max_async_ops) or, for a rendezvous request too long to go inline, no
  // free send slot - drive the engine (Progress()/Wait()) and post again.
  // kFailedPrecondition without an engine; kOutOfRange / kInvalidArgument
  // for the range as SendFrom(); kInvalidArgument for a message larger than
  // max_message_size() without rendezvous; the connection's failure, or
  // kUnavailable once the peer has closed. An op not ended by `deadline`
  // (Env clock) fails the connection with kDeadlineExceeded, as PostWrite()'s.
  //
  //   absl::StatusOr<OpHandle> sent =
  //       connection->PostSendFrom(region, slot * 4096, 4096);
  //   if (absl::IsResourceExhausted(sent.status())) {
  //     // progress the engine (Progress() or Wait()), then post again
  //   }
  //   // NextCompletion() ends *sent: slot `slot` may be written again
  absl::StatusOr<OpHandle> PostSendFrom(const MemoryRegion& region,
                                        size_t offset, size_t length,
                                        Deadline deadline = kNoDeadline);
  // Asynchronous operations posted and not yet ended (queued ones too).
  size_t async_ops_in_flight() const;
  // Of those, the ops not all of whose work requests are on the send queue
  // yet (Soft-RoCE's in-flight cap holds them, see PostWrite()).
  size_t async_ops_queued() const;

  // Opens [offset, offset + length) of `region` to this connection's peer
  // only, with `access` (kRemoteRead and/or kRemoteWrite); returns the
  // descriptor to hand to the peer (peer_region.h). Posts one signalled
  // bind on the send queue (waiting for room, like Write()) and returns when
  // it has completed; bounded by the QP like Write(), not by a deadline.
  // Errors: kInvalidArgument for an access other than remote read/write or
  // a zero length; kOutOfRange for a range outside the region;
  // kFailedPrecondition for a region registered without kBindable (or
  // without kLocalWrite for a writable binding); kUnimplemented when the
  // device has no type 2 memory windows (the message names it); ibv_alloc_mw's
  // error (errno text included); the connection's failure when the bind
  // completes in error, which fails the connection as a failed WRITE does.
  //
  //   absl::StatusOr<PeerRegion> peer =
  //       connection->BindRegion(region, 0, 4096, kRemoteWrite);
  absl::StatusOr<PeerRegion> BindRegion(const MemoryRegion& region,
                                        size_t offset, size_t length,
                                        int access);

  // Probes the peer with a zero-byte RDMA WRITE; kUnavailable when it is gone.
  absl::Status Check(Deadline deadline = kNoDeadline);

  // Tells the peer, drains, releases everything. Idempotent.
  absl::Status Close(Deadline deadline = kNoDeadline);

  // OK while the connection is usable; else why not.
  absl::Status status() const;
  ConnectionStats stats() const;

  const std::string& name() const { return name_; }
  // Largest message sent eagerly (one receive slot): the smaller of this
  // side's max_message_size and the peer's slot size. Larger ones go by
  // rendezvous when path().rendezvous, else Send() refuses them.
  uint32_t max_message_size() const { return send_limit_; }
  // SendFrom() sends messages longer than this by rendezvous.
  uint32_t rendezvous_threshold() const { return rendezvous_threshold_; }
  uint32_t usable_inline() const { return inline_.usable_inline; }
  const NegotiatedQp& negotiated_qp() const { return inline_; }
  // What the handshake settled: protocol version, path MTU (and a note when
  // the two sides' MTUs differed), READ depths, traffic class and service
  // level (transport/negotiation.h). Fixed once the connection is returned.
  const ConnectionPath& path() const { return path_; }
  // kEvent: the readiness fd (see above), else -1.
  int event_fd() const;
  // The QP, for inspection (Verbs::QueryQp) only.
  ibv_qp* qp() const { return inline_.qp; }
  const Context& context() const { return context_; }
  Env& env() const { return env_; }

 private:
  friend class ConnectionSetup;
  friend class Engine;
  friend class ConnectionTestPeer;  // tests/connection_test_peer.h
  friend class ReceivedMessage;

  class CallScope;

  Connection(const Context& context, const ConnectionOptions& options,
             std::string name);

  // Setup, used by ConnectionSetup (connection_setup.h). CreateResources() is
  // CreateQueues() (CQ, QP in RESET, channel: no registered memory) then
  // CreateBuffers() (rings and probe slot, registered).
  absl::Status CreateResources();
  absl::Status CreateQueues();
  absl::Status CreateBuffers();
  QpEndpoint LocalEndpoint() const;
  // The slot size the handshake announces: max_message_size, capped by the
  // engine's srq_slot_bytes when receives come from its shared queue.
  uint32_t OfferedSlotSize() const;
  // The probe slot the peer's keepalives write into.
  RemoteRegion ProbeTarget() const;
  absl::Status Establish(const QpEndpoint& remote, uint32_t peer_recv_slots,
                         uint32_t peer_slot_size,
                         const RemoteRegion& peer_probe,
                         const ConnectionPath& path);
  // A protocol-3 client learns the server's probe slot after Establish().
  void SetPeerProbe(const RemoteRegion& peer_probe);
  // The setup stream, kept open to notice the peer's process exiting.
  void AdoptSetupStream(Socket stream);

  // AsyncEventListener: called by the Context with no lock held.
  void OnAsyncEvent(ibv_event_type type) override;

  // ReceivedMessage::Release(): takes mu_.
  void ReleaseBorrowed(uint32_t slot);

  // What a receive does with the next message (connection_messaging.cc).
  struct ReceiveTarget {
    enum class Mode { kCopy, kBorrow, kPeek };
    Mode mode = Mode::kCopy;
    std::byte* data = nullptr;  // kCopy: where the message goes
    size_t capacity = 0;
    // kCopy into a registered region (ReceiveInto): a rendezvous message is
    // read into it directly. nullptr: `data` is registered for the READ.
    const MemoryRegion* region = nullptr;
    size_t region_offset = 0;
    ReceivedMessage* borrowed = nullptr;  // kBorrow: the view handed out
  };
  // Inline in connection_messaging.cc: an instance per receive call.
  absl::StatusOr<size_t> ReceiveMessage(const ReceiveTarget& target,
                                        Deadline deadline);
  // ReceiveMessage() when the next message came by rendezvous (the head of
  // arrived_): decodes its request and reads it into `target`.
  absl::StatusOr<size_t> ReceiveRendezvousLocked(
      std::unique_lock<ConnectionLock>& lock, const ReceiveTarget& target);
  // kInvalidArgument: the next message (`size` bytes) does not fit the
  // caller's `capacity`.
  absl::Status TooSmallError(size_t size, size_t capacity) const;

  // All below run with mu_ held.
  absl::Status UsableLocked() const;
  bool PollOnceLocked(std::unique_lock<ConnectionLock>& lock);
  // Polls; when that found nothing, sets `token` (env_.PrepareWait()) and
  // polls again. True when either poll made progress; false: wait on
  // `token`. (Inline, connection_internal.h.)
  bool PollOrPrepareWaitLocked(std::unique_lock<ConnectionLock>& lock,
                               uint64_t& token);
  // Polls until the CQ is empty.
  void DrainCqLocked(std::unique_lock<ConnectionLock>& lock);
  // One completion of this connection's: the common ones inline
  // (connection_internal.h), the rest by DispatchCompletionLocked().
  void HandleCompletionLocked(const ibv_wc& wc);
  void DispatchCompletionLocked(const ibv_wc& wc);
  // A message arrived in slot `slot` (a rendezvous request: `rendezvous`).
  void PushArrivalLocked(uint32_t slot, uint32_t length, bool rendezvous);
  void FailLocked(absl::Status status);
  // Waits for progress (kBusyPoll: spins; kEvent: sleeps on the channel),
  // probing the peer when idle for keepalive_interval, watching the setup
  // stream, async events and the watchdog. `token` is env_.PrepareWait()
  // taken before the caller last looked. kDeadlineExceeded once `deadline`
  // has passed.
  absl::Status WaitLocked(std::unique_lock<ConnectionLock>& lock,
                          uint64_t token, Deadline deadline);
  // Sleeps (lock dropped) until `until`, or earlier when woken: through the
  // Env on a virtual clock, so that time can move, and for kSpin; on cv_
  // otherwise, where the thread that made progress notifies. `token` is
  // env_.PrepareWait() taken before the caller last looked.
  void SleepLocked(std::unique_lock<ConnectionLock>& lock, uint64_t token,
                   Deadline until, WaitKind kind = WaitKind::kBlock);
  // Handles what the wait's fds reported, and pending async events.
  void ServiceLocked(std::unique_lock<ConnectionLock>& lock,
                     bool setup_readable, bool async_readable);
  void ReadSetupStreamLocked(std::unique_lock<ConnectionLock>& lock);
  // Reads the Context's pending async events, then fails the connection if
  // one of them named it. NoteAsyncEventLocked() does the second half only.
  // `symptom`: what the caller saw meanwhile, added to the message.
  void CheckAsyncEventsLocked(std::string_view symptom = {});
  void NoteAsyncEventLocked(std::string_view symptom = {});
  // When the wait must wake up at the latest for keepalive and watchdog.
  Deadline NextTimerLocked() const;
  // kEvent: re-arms the CQ if an event was taken since it was last armed
  // (catching what arrived meanwhile) and sets the readiness fd. Every call
  // ends with it.
  void LeaveLocked(std::unique_lock<ConnectionLock>& lock);
  void UpdateReadinessLocked();
  // After a failure: waits until the NIC is done with every posted work
  // request (flushed), destroying the QP if that takes over kFlushWait.
  void QuiesceLocked(std::unique_lock<ConnectionLock>& lock);
  void NotifyLocked();  // inline, connection_internal.h
  // Moves last_activity_ to `now` if anything completed since last looked.
  void NoteActivityLocked(Deadline now);
  // Posts a keepalive probe when the connection has been idle long enough.
  bool MaybeKeepaliveLocked(Deadline now);
  // Takes and acknowledges every completion event on the channel (kEvent).
  void DrainChannelLocked();
  // Fails the connection when the send queue has made no progress for the
  // watchdog's budget (armed providers only).
  void CheckStalledLocked(Deadline now);
  Clock::duration WatchdogBudgetLocked() const;
  // Stamps (send_queue_ledger.h) and posts the `count` work requests
  // chained from `first`; a refusal fails the connection (below).
  absl::Status PostSendLocked(ibv_send_wr* first, uint32_t count);
  // PostSendLocked() inline, for the message path (connection_internal.h).
  absl::Status PostSendFastLocked(ibv_send_wr* first, uint32_t count);
  // PostSendLocked()'s refusal `status`: counts the work requests before
  // `bad` as posted, fails the connection and returns the status with
  // context.
  absl::Status PostSendFailedLocked(ibv_send_wr* first, const ibv_send_wr* bad,
                                    absl::Status status);
  // A control work request (credit return, close: zero bytes with an
  // immediate; keepalive: one inline byte); returns its sequence number.
  absl::StatusOr<uint64_t> PostControlLocked(WrKind kind, uint32_t imm);
  // Gives receive slot `slot` back: to this connection's receive queue, or
  // to the engine's shared receive queue (srq_pool_).
  absl::Status RepostLocked(uint32_t slot);
  // Posts reposts_ (one chained PostRecv) and owes the peer their credits;
  // fails the connection if the post fails.
  absl::Status PostDeferredRepostsLocked();
  // Posts `slots` of the own receive ring (RepostLocked: one; the deferred:
  // a chain); fails the connection if the post fails.
  absl::Status PostOwnReceivesLocked(ReceiveReposts& slots);
  // The bytes of receive slot `slot`.
  const std::byte* RecvSlotLocked(uint32_t slot) const;
  // With a shared receive queue: every slot still held in arrived_ goes
  // back to the pool (teardown).
  void ReturnHeldSlotsLocked();
  void MaybeReturnCreditsLocked();
  // Whether what is owed to the peer is worth a credit message of its own
  // (MaybeReturnCreditsLocked() sends one while it is and it can). Inline,
  // connection_internal.h: the poll asks it before calling.
  bool CreditMessageDueLocked() const;
  // A message's receive slot is done with: reposted (own ring: batched,
  // receive_reposts.h) and its credit owed while the peer may still send.
  // (Inline, in connection_internal.h.)
  void RecycleSlotLocked(uint32_t slot);
  // RecycleSlotLocked() of an engine's shared slot: back to the pool now.
  void RecycleSharedSlotLocked(uint32_t slot, bool peer_may_send);
  // Posts the deferred reposts, then returns credits if they are worth it.
  void PostRepostsAndCreditsLocked();
  // Posts one message eagerly: from `data` inline when it fits, else by
  // scatter/gather from the registered region `from` holding it (signalled;
  // zero copy) or, `from` nullptr, copied into a send slot. Waits for
  // credit until `deadline`. Returns the sequence of its work request.
  // `kind` kRendezvous: `data` is a rendezvous request. (Inline,
  // connection_internal.h; the wait is out of line.)
  absl::StatusOr<uint64_t> SendEagerLocked(
      std::unique_lock<ConnectionLock>& lock, const std::byte* data,
      uint32_t size, const MemoryRegion* from, Deadline deadline,
      ImmKind kind = ImmKind::kData);
  // Whether a message may be posted now: a credit, send-queue room, no
  // one-sided op held back before it (it goes on the wire after them) and,
  // `copy`, a free send slot. (Inline, connection_internal.h.)
  bool CanPostMessageLocked(bool copy) const;
  // SendEagerLocked()'s wait for CanPostMessageLocked(copy): OK once it
  // holds, else the connection's failure, the peer's close, or
  // kDeadlineExceeded at `deadline` saying what was missing.
  absl::Status WaitToPostMessageLocked(std::unique_lock<ConnectionLock>& lock,
                                       bool copy, Deadline deadline);
  // Posts one message once credit, room and (for a copy) a send slot are
  // there: from `data` inline (`send_inline`), by scatter/gather from `from`
  // (signalled), or copied into a send slot (`from` nullptr); `signal`
  // signals it whatever the path. Returns the sequence of its work request.
  absl::StatusOr<uint64_t> PostMessageLocked(const std::byte* data,
                                             uint32_t size,
                                             const MemoryRegion* from,
                                             bool send_inline, ImmKind kind,
                                             bool signal);
  // PostSendFrom()'s kResourceExhausted when one message cannot be posted
  // now (`copy`: it needs a send slot), or OK.
  absl::Status SendRoomLocked(bool copy) const;
  // Send() of a message larger than the peer's slot: by rendezvous (the
  // buffer registered for it), or kInvalidArgument. Out of line, so that
  // Send()'s frame is that of the eager path.
  [[gnu::noinline]] absl::Status SendLargeLocked(
      std::unique_lock<ConnectionLock>& lock,
      std::span<const std::byte> message, Deadline deadline);
  // Sends [offset, offset + length) of `region` (kRemoteRead) by rendezvous
  // and waits until the peer has read it.
  absl::Status SendRendezvousLocked(std::unique_lock<ConnectionLock>& lock,
                                    const MemoryRegion& region, size_t offset,
                                    size_t length, Deadline deadline);
  // Reads the rendezvous message `request` into `target` (the head of
  // arrived_, slot `slot`), then reports it finished.
  absl::StatusOr<size_t> ReadRendezvousLocked(
      std::unique_lock<ConnectionLock>& lock, const ReceiveTarget& target,
      const RemoteRegion& request, uint32_t slot);
  // Takes the head of arrived_ off the queue.
  void PopArrivalLocked();
  // kInvalidArgument for a `size`-byte message larger than the peer's slot
  // when rendezvous is off, saying why it is off.
  absl::Status TooLargeError(size_t size) const;
  // `region` is registered and holds [offset, offset + length): the checks
  // of SendFrom()/ReceiveInto() (`call`), kInvalidArgument / kOutOfRange.
  absl::Status CheckCallerRange(const MemoryRegion& region, size_t offset,
                                size_t length, const char* call) const;
  // SendFrom()/PostSendFrom() (`call`): the connection usable and the range
  // inside the region, by plain comparisons; a Status is made only for the
  // error. (Inline, in connection_internal.h.)
  absl::Status CheckSendSourceLocked(const MemoryRegion& region, size_t offset,
                                     size_t length, const char* call) const;
  // kFailedPrecondition: a `length`-byte message goes by rendezvous but its
  // region was registered without kRemoteRead.
  absl::Status RendezvousAccessError(size_t length) const;
  // A borrowed view's slot `slot` is given back (RecycleSlotLocked()).
  void ReleaseViewSlotLocked(uint32_t slot);
  // The immediate of a message of `kind` carrying what is owed to the peer:
  // credits and finished rendezvous reads. (Inline, connection_internal.h.)
  uint32_t TakeImmLocked(ImmKind kind);
  // Polls and waits until `ready()` holds. The connection's failure if one
  // comes first; kDeadlineExceeded "<name>: <waiting_for> before the
  // deadline" at the deadline. Every wait of the connection goes through it.
  // (Defined in connection_internal.h, which every caller's file includes.)
  template <typename Ready>
  absl::Status WaitUntilLocked(std::unique_lock<ConnectionLock>& lock,
                               Deadline deadline, Ready ready,
                               const char* waiting_for);
  absl::Status PeerClosedError() const;
  // A kNoWait receive that found no message.
  absl::Status NoMessageWaitingError() const;
  // Waits until work request `seq` has completed (WaitUntilLocked()).
  // (Inline, connection_internal.h.)
  absl::Status WaitForSeqLocked(std::unique_lock<ConnectionLock>& lock,
                                uint64_t seq, Deadline deadline);
  // Moves `ops` through `chain`, keeping the call's work requests in
  // `pipeline` (see "One-sided"); returns when every piece has completed,
  // or, after a failure, once the NIC is done with the memory
  // (QuiesceLocked). `ops_done`: the stats counter of whole ops, nullptr
  // for a rendezvous READ (counted as a message).
  absl::Status RdmaLocked(std::unique_lock<ConnectionLock>& lock,
                          std::span<const RdmaOp> ops, bool is_write,
                          RdmaChain& chain, RdmaPipeline& pipeline,
                          uint64_t* ops_done);
  absl::Status CheckRdmaOps(std::span<const RdmaOp> ops, bool is_write) const;
  void TearDownLocked();

  // The engine's side (engine.cc calls these, with no lock held).
  // Completions for this connection, in the order polled.
  void EngineDispatch(std::span<const ibv_wc> wcs);
  // Liveness, as a wait would: `setup_readable` when fd() reported the
  // setup stream. Returns when this connection's next timer is due.
  Deadline EngineService(Deadline now, bool setup_readable);
  // The engine's CQ failed: so has this connection.
  void EngineFail(const absl::Status& status);

  // Asynchronous operations (connection_async.cc), with mu_ held.
  absl::StatusOr<OpHandle> PostAsyncLocked(std::span<const RdmaOp> ops,
                                           bool is_write, Deadline deadline);
  void CheckAsyncDeadlinesLocked(Deadline now);  // engine.h, "Deadlines"
  // Posts the pieces of accepted ops that wait (async_.posted onwards) as
  // far as the send queue and the in-flight cap allow.
  void PostQueuedAsyncLocked();
  // At most this many bytes of RDMA in flight (rdma_in_flight_bytes, or
  // its default): Write()/Read() batches, PostWrite()/PostRead() pieces.
  uint64_t RdmaInFlightCapLocked() const;
  // A send-queue completion of sequence `seq` with `status`: ends the
  // operations it decides, in order.
  void EndAsyncOpsLocked(uint64_t seq, ibv_wc_status status);
  // After a failure: the QP to ERR once (so every operation gets a flush
  // completion), and the rest ended when the queue is drained or the flush
  // did not come within kFlushWait.
  void AdvanceAsyncAfterFailureLocked(Deadline now);
  // Ends every operation still in flight (the QP is gone or never flushed).
  void EndAllAsyncOpsLocked(const absl::Status& why);
  void EndAsyncOpLocked(OpOutcome outcome, absl::Status status);
  absl::Status NoEngineError() const;
  // The longest piece one work request of Write()/Read()/PostWrite() moves.
  uint64_t MaxRdmaPieceLocked() const;
  // The pieces of Write()/Read(): MaxRdmaPieceLocked(), and under a cap on
  // bytes in flight `cap` / kRdmaPiecesUnderCap at most.
  uint64_t PipelinedPieceLocked(uint64_t cap) const;
  // Takes mu_, counted in entering_ while waiting for it, so that a busy
  // poller holding it knows whether anybody wants it.
  // (Inline, connection_internal.h.)
  std::unique_lock<ConnectionLock> Enter() const;
  // Takes mu_ on the thread that sets the connection up, leaving its bias
  // for the user's first call (connection_lock.h, LockForSetup()).
  std::unique_lock<ConnectionLock> EnterForSetup();

  // --- What every message touches, together at the front. With a thousand
  // connections on one core their state is far larger than the cache: each
  // message then pays a miss per cache line of its connection it reads, so
  // the fields of Send(), Receive() and completion dispatch share a few
  // lines instead of one each (docs/performance.md, "Many connections").
  Verbs& verbs_;
  Env& env_;
  // The engine's slot of this connection (wr_id.h), when it has an engine.
  Engine* const engine_;
  // The engine's shared receive slots, when it has them: receives come
  // from there and recv_buffer_/recv_ring_ stay empty.
  SharedReceivePool* const srq_pool_;
  // kEvent without an engine: LeaveLocked() has work (connection_internal.h).
  const bool event_mode_;
  ibv_cq* cq_ = nullptr;
  mutable ConnectionLock mu_;
  mutable std::atomic<int> entering_{0};
  int active_calls_ = 0;  // calls inside the connection (for Close)
  int cv_waiters_ = 0;    // threads in cv_.wait_until() (SleepLocked)
  int env_waiters_ = 0;   // threads of this connection in env_.Wait()
  // cv_waiters_ + env_waiters_ + (1 with a readiness fd): NotifyLocked()
  // reads this one word when nobody is to be woken (busy polling).
  int wake_interest_ = 0;
  // Send queue accounting and signalling (sequence numbers, room, bytes
  // outstanding): with send_progress_time_, the watchdog's inputs.
  SendQueueLedger sq_;
  SendCredits send_credits_;
  OwedCredits owed_credits_;
  // Own-ring slots Receive() emptied, posted before their credits go out.
  ReceiveReposts reposts_;
  // Rendezvous: requests this side sent (stats().rendezvous_sent), and how
  // many the peer has reported finished; the peer's requests this side has
  // read and not yet reported. A finished count received in a credit message
  // makes the credit of its slot due at once (credit_due_): the peer may be
  // down to the credits its reports need.
  uint64_t rendezvous_sent_ = 0;
  uint64_t rendezvous_finished_ = 0;
  uint32_t finished_owed_ = 0;
  bool credit_due_ = false;
  uint32_t rendezvous_threshold_ = 0;
  uint32_t engine_slot_ = 0;
  uint32_t next_send_slot_ = 0;
  uint32_t send_limit_ = 0;
  uint32_t slot_size_ = 0;
  int ready_fd_ = -1;  // kEvent: eventfd, set while readiness holds
  bool established_ = false;
  // established_ && !closing_ && !closed_ && failure_.ok(), kept where
  // those change: the message path reads one flag.
  bool open_ = false;
  bool peer_closed_ = false;
  bool closing_ = false;
  bool closed_ = false;
  bool engine_attached_ = false;
  bool keepalive_outstanding_ = false;
  bool ready_set_ = false;
  bool cq_armed_ = false;
  absl::Status failure_;
  // Completions seen, and the count when last_activity_ was last moved: the
  // clock is read only when somebody waits, not per completion.
  uint64_t completions_ = 0;
  uint64_t engine_dispatched_ = 0;  // completions the engine handed over
  // Received messages not yet taken by a receive: the slot, the bytes the
  // NIC wrote, and whether it is a rendezvous request.
  struct Arrival {
    uint32_t slot = 0;
    uint32_t length : 31 = 0;
    uint32_t rendezvous : 1 = 0;
  };
  std::vector<Arrival> arrived_;
  size_t arrived_head_ = 0;
  size_t arrived_count_ = 0;
  // Asynchronous operations in flight, oldest first, with what their
  // pieces need to be posted later (the cap on bytes in flight; async_op.h).
  AsyncOpRing async_;
  NegotiatedQp inline_;
  // Send()'s work request and gather entry (connection_messaging.cc).
  ibv_send_wr message_wr_{};
  ibv_sge message_sge_{};
  // Send slots are used round robin; each remembers the sequence of the
  // send that used it, and is free once that sequence has completed.
  std::vector<uint64_t> send_slot_seq_;
  MemoryRegion send_ring_;
  MemoryRegion recv_ring_;
  std::condition_variable_any cv_;
  ConnectionStats stats_;
  // --- The rest: setup, liveness, one-sided operations, teardown.

  const Context& context_;
  const ConnectionOptions options_;
  std::string name_;  // set by the setup code, fixed once established
  // When the connection was made, on its Env's clock: the asynchronous
  // posts check their deadline's clock against it (OnClockOf) without
  // reading the clock.
  const Deadline made_at_;

  // Verbs resources.
  ibv_comp_channel* channel_ = nullptr;
  AlignedBuffer send_buffer_;
  AlignedBuffer recv_buffer_;
  int wakeup_fd_ = -1;  // kEvent: wakes a waiter blocked in poll(2)
  int epoll_fd_ = -1;   // kEvent: what event_fd() returns
  // A 64-byte registered slot the peer's probes write into, and the peer's.
  AlignedBuffer probe_buffer_;
  MemoryRegion probe_slot_;
  RemoteRegion peer_probe_;
  ConnectionPath path_;
  Socket setup_;
  bool setup_watched_ = false;  // setup_ open and not yet at EOF
  bool peer_goodbye_ = false;
  bool handshake_done_ = false;      // READY sent / received: the peer is up
  std::atomic<int> async_event_{0};  // ibv_event_type + 1, 0: none
  bool registered_ = false;

  // When the send queue last made progress (or became busy).
  Deadline send_progress_time_;
  uint64_t watchdog_seen_ = ~uint64_t{0};  // sq_.completed() when last looked
  bool watchdog_armed_ = false;
  Clock::duration completion_timeout_{};
  uint64_t activity_seen_ = 0;
  uint32_t spin_turns_ = 0;
  // PAUSEs the busy-poll waits executed: only to let in a thread waiting for
  // mu_ (tests/connection_test_peer.h).
  uint64_t spin_pauses_ = 0;
  BusyPollGate service_gate_;  // when a busy-poll look is a service turn

  uint32_t psn_ = 0;
  bool event_waiter_ = false;  // a thread is blocked on the channel fd
  Deadline last_activity_;

  // The chain Write()/Read() lay out, and the one PostQueuedAsyncLocked()
  // does: apart, because the latter runs from engine dispatch, which a
  // Write() drives while it waits for its pieces to complete.
  RdmaChain rdma_chain_;
  RdmaChain async_chain_;
  // What of Write()/Read()'s chains is still on the send queue.
  RdmaPipeline rdma_pipeline_;
  // A rendezvous READ's chain: Receive() may run beside a Write() (see
  // "Thread-safety"). Allocated at the first rendezvous message received.
  RdmaChain rendezvous_chain_;
  RdmaPipeline rendezvous_pipeline_;
  bool rendezvous_chain_ready_ = false;
  // Windows bound by BindRegion(), shared with their PeerRegions; released
  // ones are dropped at the next bind, the rest at teardown.
  std::vector<std::shared_ptr<BoundWindow>> windows_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_CONNECTION_H_
