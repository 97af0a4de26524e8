// File: transport/listener.cc
//
// The Listener's admission tables: creating it (the token rule, the
// limits), accepting sockets into the silent table, promoting those that
// speak into the handshake table, choosing whom to drop or displace when a
// table is full, expiring deadlines, and the Accept() loop that waits on
// them all. Each handshake's own steps are listener_handshake.cc's.

#include "transport/listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "transport/connection_setup.h"
#include "transport/deadline.h"
#include "transport/handshake.h"
#include "transport/listener_pending.h"

namespace rdma_transport {
namespace {

// True for a "host:port" whose host is a loopback address literal
// (127.0.0.0/8, ::1) or "localhost"; a name that merely starts with "127."
// is not.
bool IsLoopback(std::string_view address) {
  absl::StatusOr<HostPort> split = SplitHostPort(address);
  if (!split.ok()) return false;
  const std::string& host = split->host;
  if (host == "localhost") return true;
  in_addr v4 = {};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6 = {};
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 &&
         IN6_IS_ADDR_LOOPBACK(&v6);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Listener>> Listener::Create(
    const Context& context, std::string_view address,
    const ConnectionOptions& options, const ListenerOptions& listener_options) {
  SetupNetwork& network = SetupNetworkOf(context.env());
  for (auto [name, value] :
       {std::pair<const char*, size_t>{"max_pending_handshakes",
                                       listener_options.max_pending_handshakes},
        {"max_handshakes_per_source",
         listener_options.max_handshakes_per_source},
        {"max_silent_sockets", listener_options.max_silent_sockets}}) {
    if (value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ListenerOptions::", name, " is 0: the listener could serve no one"));
    }
  }
  if (options.token.empty() && !listener_options.allow_unauthenticated &&
      !IsLoopback(address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listener on ", std::string(address),
        " without a token: any host that reaches it could make the server "
        "create QPs and register memory; set ConnectionOptions::token on "
        "both sides, or ListenerOptions::allow_unauthenticated = true"));
  }
  absl::StatusOr<SetupListener> listening =
      network.Listen(address, listener_options.backlog);
  if (!listening.ok()) return listening.status();
  std::unique_ptr<Listener> listener(
      new Listener(context, options, listener_options));
  listener->address_ = listening->address;
  listener->listen_fd_ = listening->fd;
  return listener;
}

Listener::Listener(const Context& context, const ConnectionOptions& options,
                   const ListenerOptions& listener_options)
    : context_(context),
      env_(context.env()),
      network_(SetupNetworkOf(context.env())),
      options_(options),
      listener_options_(listener_options),
      max_silent_sockets_(listener_options.max_silent_sockets) {
  rlimit files = {};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 &&
      files.rlim_cur != RLIM_INFINITY) {
    max_silent_sockets_ = std::min<size_t>(
        max_silent_sockets_, std::max<rlim_t>(1, files.rlim_cur / 4));
  }
}

Listener::~Listener() {
  if (listen_fd_ >= 0) network_.CloseListener(listen_fd_);
}

ListenerStats Listener::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void Listener::Forget(Pending& pending, uint64_t ListenerStats::*counter,
                      const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++(stats_.*counter);
    stats_.last_failure = absl::StrCat(pending.peer, ": ", reason);
  }
  pending.socket.Close();
  if (pending.connection != nullptr && pending.recyclable &&
      spare_.size() < listener_options_.max_pending_handshakes) {
    // Its QP never left RESET: as good as new for the next HELLO.
    spare_.push_back(std::move(pending.connection));
  }
  pending.connection.reset();
  pending.recyclable = false;
}

namespace {

// True when a peer that has sent nothing yet has bytes waiting. A peer that
// has gone (EOF) or stays silent is not.
bool HasDataWaiting(int fd) {
  uint8_t byte;
  return recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

// The frame format a silent socket's first bytes announce, without taking
// them: a REJECT before its HELLO is decoded then goes in a format it reads.
uint16_t PeekFormat(int fd) {
  uint8_t bytes[6];
  if (recv(fd, bytes, sizeof(bytes), MSG_PEEK | MSG_DONTWAIT) !=
      static_cast<ssize_t>(sizeof(bytes))) {
    return kLegacyHandshakeVersion;
  }
  const uint32_t magic = (uint32_t{bytes[0]} << 24) |
                         (uint32_t{bytes[1]} << 16) |
                         (uint32_t{bytes[2]} << 8) | bytes[3];
  const uint16_t version = static_cast<uint16_t>((bytes[4] << 8) | bytes[5]);
  return magic == kHandshakeMagic && version == kHandshakeVersion
             ? kHandshakeVersion
             : kLegacyHandshakeVersion;
}

// How long a client turned away because every slot is busy should wait.
constexpr uint32_t kBusyRetryAfterMs = 10;

}  // namespace

Listener::Table::iterator Listener::ChooseSilentVictim() {
  // A real client sends HELLO right after connecting: the oldest silent
  // socket with nothing waiting is the likeliest half-open or idle one.
  for (auto it = silent_.begin(); it != silent_.end(); ++it) {
    if (!HasDataWaiting((*it)->socket.fd())) return it;
  }
  return silent_.end();
}

Listener::Table::iterator Listener::ChooseHandshakeVictim(
    const std::string* source) {
  // The oldest stalled mid-frame first, then the oldest still waiting for
  // READY (a real client answers within a round trip and a QP transition;
  // one whose READY has arrived is kept). With `source`, only its own.
  auto eligible = [source](const Pending& pending) {
    return source == nullptr || pending.source == *source;
  };
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (eligible(**it) && !(*it)->awaiting_ready && !(*it)->bytes.empty()) {
      return it;
    }
  }
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (eligible(**it) && (*it)->awaiting_ready &&
        !HasDataWaiting((*it)->socket.fd())) {
      return it;
    }
  }
  return pending_.end();
}

void Listener::AcceptNewSockets() {
  // At most a handshake table's worth per round, so the handshakes already
  // pending are served between bursts of a flood.
  for (size_t i = 0; i < listener_options_.max_pending_handshakes; ++i) {
    absl::StatusOr<std::optional<SetupStream>> stream =
        network_.Accept(listen_fd_);
    // Drained, or a transient error (counted by nothing: try next round).
    if (!stream.ok() || !stream->has_value()) return;
    auto pending = std::make_unique<Pending>();
    pending->socket = Socket((*stream)->fd);
    pending->peer = (*stream)->peer_address;
    absl::StatusOr<HostPort> split = SplitHostPort(pending->peer);
    pending->source = split.ok() ? split->host : pending->peer;
    pending->deadline = env_.DeadlineIn(options_.handshake_timeout);
    if (silent_.size() >= max_silent_sockets_) {
      auto victim = ChooseSilentVictim();
      if (victim == silent_.end()) {
        Forget(*pending, &ListenerStats::dropped,
               "dropped: every silent socket has its first bytes waiting");
        continue;
      }
      Forget(**victim, &ListenerStats::dropped,
             "dropped: too many sockets that sent nothing, this one idle");
      silent_.erase(victim);
    }
    silent_.push_back(std::move(pending));
  }
}

std::unique_ptr<Connection> Listener::Promote(size_t index) {
  Pending& pending = *silent_[index];
  if (!HasDataWaiting(pending.socket.fd())) {
    // Readable with nothing to read: EOF or an error.
    Forget(pending, &ListenerStats::abandoned,
           "went away before sending anything");
    return nullptr;
  }
  // Handshakes closed earlier in this round free their slots now.
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [](const std::unique_ptr<Pending>& other) {
                                  return other == nullptr ||
                                         !other->socket.valid();
                                }),
                 pending_.end());
  const size_t from_source = static_cast<size_t>(std::count_if(
      pending_.begin(), pending_.end(),
      [&](const std::unique_ptr<Pending>& other) {
        return other != nullptr && other->source == pending.source;
      }));
  const bool source_full =
      from_source >= listener_options_.max_handshakes_per_source;
  if (source_full ||
      pending_.size() >= listener_options_.max_pending_handshakes) {
    // A source at its limit gives up one of its own, never another's.
    auto victim =
        ChooseHandshakeVictim(source_full ? &pending.source : nullptr);
    if (victim == pending_.end()) {
      pending.format = PeekFormat(pending.socket.fd());
      Reject(pending,
             source_full
                 ? absl::StrCat("server busy: all ",
                                listener_options_.max_handshakes_per_source,
                                " handshake slots for ", pending.source,
                                " are making progress; try again")
                 : absl::StrCat("server busy: all ",
                                listener_options_.max_pending_handshakes,
                                " handshake slots are making progress; try "
                                "again"),
             &ListenerStats::dropped, kBusyRetryAfterMs);
      return nullptr;
    }
    if ((*victim)->awaiting_ready) {
      Reject(**victim,
             "displaced: no READY before newer handshakes needed the slot; "
             "try again",
             &ListenerStats::dropped, kBusyRetryAfterMs);
    } else {
      Forget(**victim, &ListenerStats::dropped,
             "dropped: too many pending handshakes, this one stalled "
             "mid-frame");
    }
    pending_.erase(victim);
  }
  pending_.push_back(std::move(silent_[index]));
  return Advance(*pending_.back());
}

absl::StatusOr<std::unique_ptr<Connection>> Listener::Accept(
    Deadline deadline) {
  std::vector<pollfd> fds;
  std::vector<bool> readable;
  while (true) {
    // Expire silent sockets and handshakes that took too long.
    const uint64_t token = env_.PrepareWait();
    const Deadline now = env_.Now();
    if (!OnClockOf(deadline, now)) [[unlikely]] {
      return WrongClockError(
          absl::StrCat("listener on ", address_, ": Accept()"), deadline);
    }
    for (Table* table : {&silent_, &pending_}) {
      for (auto it = table->begin(); it != table->end();) {
        if ((*it)->deadline <= now) {
          Forget(**it, &ListenerStats::timed_out,
                 (*it)->awaiting_ready
                     ? absl::StrCat("no READY within ready_timeout (",
                                    listener_options_.ready_timeout.count(),
                                    " ms) of ACCEPT")
                     : absl::StrCat("handshake timed out after ",
                                    (*it)->bytes.size(),
                                    " bytes of the current frame"));
          it = table->erase(it);
        } else {
          ++it;
        }
      }
    }

    // fds[0] the listening socket, then pending_, then silent_.
    Deadline wake = deadline;
    fds.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const Table* table : {&pending_, &silent_}) {
      for (const auto& pending : *table) {
        fds.push_back({pending->socket.fd(), POLLIN, 0});
        wake = std::min(wake, pending->deadline);
      }
    }
    const int ready = env_.Wait(token, fds, wake, WaitKind::kBlock);
    if (ready > 0) {
      // Handshakes under way first, then silent sockets that spoke, then new
      // sockets. Advancing one may move or drop others: note who was
      // readable before touching either table.
      const size_t handshakes = pending_.size();
      const size_t silent = silent_.size();
      readable.assign(handshakes + silent, false);
      for (size_t i = 0; i < handshakes + silent; ++i) {
        readable[i] = fds[i + 1].revents != 0;
      }
      std::unique_ptr<Connection> established;
      for (size_t i = 0; i < handshakes && established == nullptr; ++i) {
        if (readable[i]) established = Advance(*pending_[i]);
      }
      auto gone = [](const std::unique_ptr<Pending>& pending) {
        return pending == nullptr || !pending->socket.valid();
      };
      // Closed handshakes leave the table before silent sockets compete for
      // their slots; promoted silent sockets leave a null behind.
      pending_.erase(std::remove_if(pending_.begin(), pending_.end(), gone),
                     pending_.end());
      for (size_t i = 0; i < silent && established == nullptr; ++i) {
        if (readable[handshakes + i]) established = Promote(i);
      }
      silent_.erase(std::remove_if(silent_.begin(), silent_.end(), gone),
                    silent_.end());
      pending_.erase(std::remove_if(pending_.begin(), pending_.end(), gone),
                     pending_.end());
      if (established != nullptr) return established;
      if (fds[0].revents & POLLIN) AcceptNewSockets();
    }
    if (env_.Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no connection accepted on ", address_, " before the deadline (",
          pending_.size(), " handshakes pending, ", silent_.size(),
          " sockets silent)"));
    }
  }
}

}  // namespace rdma_transport
