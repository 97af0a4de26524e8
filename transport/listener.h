// File: transport/listener.h
//
// Making connections: a Listener on a TCP address accepts them, Connect()
// dials one. Both run the handshake of handshake.h over the Context's setup
// channel (TCP; on a virtual-time simulator its in-memory network, see
// sim/sim_env.h), wait through the Context's Env, and bring the RC QPs up
// with the Context's traffic class, service level and MTU. The setup stream
// stays open for the connection's life: when the peer's process dies, the
// kernel closes it and the connection fails at once (connection.h).
//
//   absl::StatusOr<std::unique_ptr<Listener>> listener =
//       Listener::Create(server_context, "0.0.0.0:18515", options);
//   absl::StatusOr<std::unique_ptr<Connection>> accepted =
//       (*listener)->Accept(server_context.env().DeadlineIn(10s));
//
//   absl::StatusOr<std::unique_ptr<Connection>> connection =
//       Connect(client_context, "10.0.0.1:18515", options);
//
// The Listener runs every pending handshake at once on non-blocking sockets:
// a peer that sends one byte and goes silent, or a flood of half-open TCP
// connections, costs each at most `handshake_timeout` and never delays the
// others. Sockets whose peer has sent nothing yet cost a descriptor each and
// are held apart from handshakes under way, so a flood of them cannot crowd
// out a real peer that is a few milliseconds late with its HELLO: when
// `max_silent_sockets` are held, a newcomer displaces the oldest with nothing
// waiting (MSG_PEEK). A socket moves to the handshake table when its first
// bytes arrive.
//
// What a stranger gets (protocol 3, handshake.h): the token is checked
// first; a HELLO that passes gets a QP and CQ in RESET (no registered memory,
// no address the stranger chose) from a pool of at most
// `max_pending_handshakes`, and ACCEPT. Only the client's READY, one round
// trip later, makes the server register the rings and probe slot, post its
// receives, bring the QP to RTS and answer ESTABLISHED; a peer that never
// answers leaves its QP, still in RESET, to the next HELLO. When the
// handshake table is full, a newcomer displaces the oldest handshake stalled
// mid-frame, else the oldest still waiting for READY (told "displaced", with
// a retry time: Connect() retries within its handshake_timeout); when every
// slot has its next frame waiting, the newcomer is turned away ("server
// busy", with a retry time). READY must come within `ready_timeout`. A
// protocol-2 client (format-2 HELLO) is still served as before - its rings
// registered and its QP brought up at HELLO - unless `accept_legacy_peers` is
// false. A bad handshake (wrong magic, format or token, a truncated or
// oversized frame, absurd values) is answered with a REJECT saying why, the
// socket is closed, and Accept() goes on serving; the Listener's stats()
// count each outcome. docs/security.md has the measured limits.
//
// Errors of Create(): kInvalidArgument for a non-loopback address without a
// token (unless ListenerOptions::allow_unauthenticated), or what the setup
// network's Listen() returns.
//
// Connect() is declared in connect.h (included here), with its errors.
//
// Thread-safety: A Listener is thread-compatible:
// call Accept() from one thread at a time; stats() and address() from any.
// Ownership: connections outlive the Listener that accepted them; all must
// be destroyed before the Context.

#ifndef RDMA_TRANSPORT_TRANSPORT_LISTENER_H_
#define RDMA_TRANSPORT_TRANSPORT_LISTENER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/connect.h"  // Connect(), for existing includers
#include "transport/connection.h"
#include "transport/context.h"
#include "transport/deadline.h"
#include "transport/negotiation.h"
#include "transport/tcp.h"

namespace rdma_transport {

struct ListenerOptions {
  // Handshakes under way: the peer has sent bytes (the HELLO is read and
  // answered as soon as it is whole; the server's QP then waits for READY).
  size_t max_pending_handshakes = 64;
  // Of those, at most this many from one IP address: a newcomer from a
  // source at its limit displaces that source's own oldest waiting
  // handshake, so one host flooding cannot displace other hosts' peers.
  size_t max_handshakes_per_source = 32;
  // Accepted sockets whose peer has sent nothing yet (one descriptor and a
  // small record each, no verbs resources). A real client writes its HELLO
  // right after connect(); the table has to hold every socket a flood opens
  // in the time that client may be descheduled in between: 1024 covers about
  // 40 ms at 24 000 sockets/s. Capped at Create() to a quarter of the
  // process's RLIMIT_NOFILE soft limit (256 under the usual 1024).
  size_t max_silent_sockets = 1024;
  // After ACCEPT, how long the client has to answer READY. Meanwhile a
  // protocol-3 peer holds one pooled QP and CQ in RESET (a protocol-2 peer:
  // also its two registered rings); a real client answers after one round
  // trip and bringing its QP to RTS (milliseconds). Under pressure a waiting
  // handshake is displaced sooner (see above). Never longer than what is
  // left of the handshake timeout.
  std::chrono::milliseconds ready_timeout{500};
  // Who chooses the traffic class and service level (transport/
  // negotiation.h): by default each side its own MC_IB_TC / MC_IB_SL.
  TrafficPolicy traffic_policy = TrafficPolicy::kEachSideOwn;
  // Serve clients that speak only protocol 2 (which makes the server
  // register their rings before their READY). False refuses them with a
  // REJECT naming this option.
  bool accept_legacy_peers = true;
  // A listener on an address other than loopback (127.0.0.0/8, ::1,
  // localhost) without a ConnectionOptions::token would let any host that
  // reaches it create QPs and registered memory: Create() refuses unless this
  // says that is what the caller wants.
  bool allow_unauthenticated = false;
  // The kernel's accept queue. When it overflows under a flood, the final
  // ACK of a real peer's connect is dropped and its HELLO is retransmitted
  // only after a second: large, so a flood fills the pending table (where
  // silent sockets are dropped) rather than the kernel's queue. Capped by
  // net.core.somaxconn (4096 on Debian 12).
  int backlog = 4096;
};

struct ListenerStats {
  uint64_t accepted = 0;
  uint64_t rejected = 0;        // bad handshakes, answered with REJECT
  uint64_t timed_out = 0;       // past handshake_timeout, or ready_timeout
  uint64_t dropped = 0;         // evicted by max_silent_sockets or
                                // max_pending_handshakes
  uint64_t abandoned = 0;       // the client went away mid-handshake
  uint64_t legacy_peers = 0;    // protocol-2 HELLOs answered
  uint64_t shells_created = 0;  // pooled QPs created (reuse is not counted)
  std::string last_failure;
};

class Listener {
 public:
  // `address` is "host:port"; port 0 picks a free port (see address()).
  static absl::StatusOr<std::unique_ptr<Listener>> Create(
      const Context& context, std::string_view address,
      const ConnectionOptions& options = {},
      const ListenerOptions& listener_options = {});

  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  ~Listener();

  // The bound address, "ip:port".
  const std::string& address() const { return address_; }

  // The next established connection; kDeadlineExceeded if none by then.
  absl::StatusOr<std::unique_ptr<Connection>> Accept(
      Deadline deadline = kNoDeadline);

  ListenerStats stats() const;

 private:
  struct Pending;

  Listener(const Context& context, const ConnectionOptions& options,
           const ListenerOptions& listener_options);

  using Table = std::deque<std::unique_ptr<Pending>>;

  void AcceptNewSockets();
  // Moves silent_[index], whose peer has sent something (or gone), to the
  // handshake table and advances it; returns a connection when that completes
  // the handshake.
  std::unique_ptr<Connection> Promote(size_t index);
  // The oldest silent socket with nothing waiting, or end() if none.
  Table::iterator ChooseSilentVictim();
  // The oldest handshake stalled mid-frame, else the oldest waiting for a
  // READY that has not arrived (only `source`'s when given), or end().
  Table::iterator ChooseHandshakeVictim(const std::string* source);
  // Advances one handshake; returns a connection when it completes.
  std::unique_ptr<Connection> Advance(Pending& pending);
  // Answers a protocol-2 HELLO: everything set up before ACCEPT.
  std::unique_ptr<Connection> AnswerLegacyHello(Pending& pending,
                                                const HandshakeMessage& hello,
                                                std::string name);
  void AwaitReady(Pending& pending);
  // Protocol 3, on READY: registers the rings, brings the QP up, answers
  // ESTABLISHED.
  absl::Status Complete(Pending& pending);
  // A QP and CQ in RESET from the pool, or new.
  absl::StatusOr<std::unique_ptr<Connection>> TakeShell(std::string name);
  // Answers REJECT with `reason` (best effort; with a retry time to a
  // format-3 peer when given), counts it and closes.
  void Reject(Pending& pending, const std::string& reason,
              uint64_t ListenerStats::*counter = &ListenerStats::rejected,
              std::optional<uint32_t> retry_after_ms = std::nullopt);
  void Forget(Pending& pending, uint64_t ListenerStats::*counter,
              const std::string& reason);

  const Context& context_;
  Env& env_;
  SetupNetwork& network_;
  const ConnectionOptions options_;
  const ListenerOptions listener_options_;
  int listen_fd_ = -1;
  std::string address_;
  size_t max_silent_sockets_;
  Table silent_;   // accepted, nothing received yet; oldest first
  Table pending_;  // handshakes under way; oldest first
  // Shells (QP in RESET, CQ) a peer that never sent READY left behind; at
  // most max_pending_handshakes.
  std::vector<std::unique_ptr<Connection>> spare_;

  mutable std::mutex stats_mu_;
  ListenerStats stats_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_LISTENER_H_
