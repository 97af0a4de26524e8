#include "transport/listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "transport/handshake.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {

// The friend of Connection that builds and establishes one.
class ConnectionSetup {
 public:
  // Queues and registered buffers both (a client, or a protocol-2 server).
  static absl::StatusOr<std::unique_ptr<Connection>> Create(
      const Context& context, const ConnectionOptions& options,
      std::string name) {
    absl::StatusOr<std::unique_ptr<Connection>> connection =
        CreateShell(context, options, std::move(name));
    if (!connection.ok()) return connection;
    if (absl::Status status = CreateBuffers(**connection); !status.ok()) {
      return status;
    }
    return connection;
  }
  // The CQ and a QP left in RESET, nothing registered: what a protocol-3
  // server commits before the peer's READY.
  static absl::StatusOr<std::unique_ptr<Connection>> CreateShell(
      const Context& context, const ConnectionOptions& options,
      std::string name) {
    std::unique_ptr<Connection> connection(
        new Connection(context, options, std::move(name)));
    if (absl::Status status = connection->CreateQueues(); !status.ok()) {
      return WithContext(status, connection->name());
    }
    return connection;
  }
  static absl::Status CreateBuffers(Connection& connection) {
    if (absl::Status status = connection.CreateBuffers(); !status.ok()) {
      return WithContext(status, connection.name());
    }
    return absl::OkStatus();
  }
  static void Rename(Connection& connection, std::string name) {
    connection.name_ = std::move(name);
  }
  static void NewPsn(Connection& connection) {
    connection.psn_ = random() & 0xffffff;
  }
  static QpEndpoint LocalEndpoint(const Connection& connection) {
    return connection.LocalEndpoint();
  }
  static RemoteRegion ProbeTarget(const Connection& connection) {
    return connection.ProbeTarget();
  }
  // The peer's probe slot as a HELLO, ACCEPT or ESTABLISHED names it.
  static RemoteRegion PeerProbe(const HandshakeMessage& peer) {
    RemoteRegion probe;
    probe.address = peer.probe_address;
    probe.rkey = peer.probe_rkey;
    probe.length = peer.probe_rkey != 0 ? 1 : 0;
    return probe;
  }
  static absl::Status Establish(Connection& connection,
                                const HandshakeMessage& peer,
                                const ConnectionPath& path) {
    return connection.Establish(peer.endpoint, peer.recv_slots, peer.slot_size,
                                PeerProbe(peer), path);
  }
  static void SetPeerProbe(Connection& connection,
                           const HandshakeMessage& established) {
    connection.SetPeerProbe(PeerProbe(established));
  }
  static void AdoptSetupStream(Connection& connection, Socket stream) {
    connection.AdoptSetupStream(std::move(stream));
  }
};

namespace {

// True for a "host:port" whose host is a loopback address (127.0.0.0/8,
// ::1, localhost): only this machine's processes can reach it.
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

bool SameToken(std::string_view a, std::string_view b) {
  // Constant time in the length of the longer token.
  uint8_t difference = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    uint8_t x = i < a.size() ? static_cast<uint8_t>(a[i]) : 0;
    uint8_t y = i < b.size() ? static_cast<uint8_t>(b[i]) : 0;
    difference |= x ^ y;
  }
  return difference == 0;
}

// This side's HELLO or ACCEPT in frame format `version`. A format-3
// ACCEPT names `chosen` and leaves the probe slot to ESTABLISHED (the server
// registers nothing before READY); `accept_traffic` is what it tells the
// client to use.
HandshakeMessage OfferFor(const Connection& connection,
                          const ConnectionOptions& options, HandshakeType type,
                          uint16_t version,
                          std::optional<TrafficSettings> accept_traffic = {},
                          uint16_t chosen = kHandshakeVersion) {
  HandshakeMessage message;
  message.type = type;
  message.version = version;
  message.endpoint = ConnectionSetup::LocalEndpoint(connection);
  message.recv_slots = options.recv_slots;
  message.slot_size = options.max_message_size;
  if (type == HandshakeType::kHello) message.token = options.token;
  if (version < kHandshakeVersion || type == HandshakeType::kHello) {
    const RemoteRegion probe = ConnectionSetup::ProbeTarget(connection);
    message.probe_address = probe.address;
    message.probe_rkey = probe.rkey;
  }
  if (version >= kHandshakeVersion) {
    if (type == HandshakeType::kAccept) {
      message.min_version = chosen;
      message.max_version = chosen;
      message.traffic = accept_traffic;
    } else {
      message.min_version = kMinHandshakeVersion;
      message.max_version = kHandshakeVersion;
      message.traffic = LocalTraffic(connection.context());
    }
    message.read_depth = LocalReadDepth(connection.context());
  }
  return message;
}

absl::Status SendFrame(Env& env, int fd, const HandshakeMessage& message,
                       Deadline deadline) {
  absl::StatusOr<std::vector<uint8_t>> frame = EncodeHandshake(message);
  if (!frame.ok()) return frame.status();
  return WriteAll(env, fd, *frame, deadline);
}

absl::StatusOr<HandshakeMessage> ReceiveFrame(Env& env, int fd,
                                              Deadline deadline) {
  uint8_t header_bytes[kHandshakeHeaderSize];
  if (absl::Status status = ReadExact(env, fd, header_bytes, deadline);
      !status.ok()) {
    return WithContext(status, "handshake");
  }
  absl::StatusOr<HandshakeHeader> header = DecodeHandshakeHeader(header_bytes);
  if (!header.ok()) return header.status();
  std::vector<uint8_t> body(header->body_length);
  if (absl::Status status = ReadExact(env, fd, body, deadline); !status.ok()) {
    return WithContext(status, "handshake");
  }
  return DecodeHandshakeBody(*header, body);
}

}  // namespace

namespace {

// One attempt of Connect(). On a REJECT that says when to retry (a busy
// server), sets *retry_after and fails with kUnavailable.
// A REJECT from a server that predates protocol 3, refusing a format-3
// frame: "handshake: peer speaks version 3, this side speaks 2".
bool IsLegacyServerRefusal(const HandshakeMessage& reject) {
  return reject.version == kLegacyHandshakeVersion &&
         reject.reason.find("this side speaks 2") != std::string::npos;
}

// One attempt of Connect() in frame format `format`. On a REJECT that says
// when to retry (a busy server), sets *retry_after and fails with
// kUnavailable; on a server that speaks only protocol 2, sets
// *legacy_server.
absl::StatusOr<std::unique_ptr<Connection>> ConnectOnce(
    const Context& context, std::string_view address,
    const ConnectionOptions& options, uint16_t format, Deadline deadline,
    std::chrono::milliseconds* retry_after, bool* legacy_server) {
  Env& env = context.env();
  // The QP and rings first: HELLO then follows the connect at once, so a
  // listener under a flood hears this peer before it picks sockets to drop.
  absl::StatusOr<std::unique_ptr<Connection>> connection =
      ConnectionSetup::Create(
          context, options,
          options.name.empty()
              ? absl::StrCat("connection -> ", std::string(address))
              : options.name);
  if (!connection.ok()) return connection.status();
  absl::StatusOr<SetupStream> stream =
      SetupNetworkOf(env).Connect(env, address, deadline);
  if (!stream.ok()) return stream.status();
  Socket socket(stream->fd);
  if (options.name.empty()) {
    ConnectionSetup::Rename(
        **connection, absl::StrCat("connection ", stream->local_address, " -> ",
                                   stream->peer_address));
  }
  const std::string name = (*connection)->name();

  HandshakeMessage hello =
      OfferFor(**connection, options, HandshakeType::kHello, format);
  if (format >= kHandshakeVersion) {
    hello.unknown_extensions = options.extra_hello_extensions;
  }
  if (absl::Status status = SendFrame(env, socket.fd(), hello, deadline);
      !status.ok()) {
    return WithContext(status, name);
  }
  // A REJECT: the server's reason; retryable when it says when.
  auto rejected = [&](const HandshakeMessage& reject) -> absl::Status {
    if (reject.retry_after_ms.has_value()) {
      *retry_after = std::chrono::milliseconds(*reject.retry_after_ms);
      return absl::UnavailableError(absl::StrCat(
          name, ": the server turned the connection away: ", reject.reason,
          " (retry after ", *reject.retry_after_ms, " ms)"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        name, ": the server rejected the connection: ", reject.reason));
  };
  absl::StatusOr<HandshakeMessage> reply =
      ReceiveFrame(env, socket.fd(), deadline);
  if (!reply.ok()) return WithContext(reply.status(), name);
  if (reply->type == HandshakeType::kReject) {
    if (format >= kHandshakeVersion && IsLegacyServerRefusal(*reply)) {
      *legacy_server = true;
    }
    return rejected(*reply);
  }
  if (reply->type != HandshakeType::kAccept) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": handshake: expected ACCEPT, got ",
                     HandshakeTypeName(reply->type)));
  }
  const bool legacy = reply->version < kHandshakeVersion;
  if (reply->version != format) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": handshake: a format-", format,
                     " HELLO answered in format ", reply->version));
  }
  if (!legacy && (reply->max_version < kMinHandshakeVersion ||
                  reply->max_version > kHandshakeVersion)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": handshake: the server chose protocol version ",
        reply->max_version, ", which this side (", kMinHandshakeVersion, "..",
        kHandshakeVersion, ") did not offer"));
  }
  const ConnectionPath path = NegotiateAsClient(context, *reply);
  if (absl::Status status =
          ConnectionSetup::Establish(**connection, *reply, path);
      !status.ok()) {
    return status;
  }
  HandshakeMessage ready;
  ready.type = HandshakeType::kReady;
  ready.version = reply->version;
  if (absl::Status status = SendFrame(env, socket.fd(), ready, deadline);
      !status.ok()) {
    // A server that displaced this handshake closed after its REJECT, which
    // may be waiting to be read.
    absl::StatusOr<HandshakeMessage> late = ReceiveFrame(
        env, socket.fd(),
        std::min(deadline, env.DeadlineIn(std::chrono::milliseconds(100))));
    if (late.ok() && late->type == HandshakeType::kReject) {
      return rejected(*late);
    }
    return WithContext(status, name);
  }
  if (!legacy) {
    // The server registers its rings, posts its receives and brings its QP
    // up only now; nothing may be sent before it says so.
    absl::StatusOr<HandshakeMessage> established =
        ReceiveFrame(env, socket.fd(), deadline);
    if (!established.ok()) return WithContext(established.status(), name);
    if (established->type == HandshakeType::kReject) {
      return rejected(*established);
    }
    if (established->type != HandshakeType::kEstablished) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": handshake: expected ESTABLISHED, got ",
                       HandshakeTypeName(established->type)));
    }
    ConnectionSetup::SetPeerProbe(**connection, *established);
  }
  // Kept open: its EOF is how the server learns that this process is gone.
  ConnectionSetup::AdoptSetupStream(**connection, std::move(socket));
  return connection;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Connection>> Connect(
    const Context& context, std::string_view address,
    const ConnectionOptions& options) {
  Env& env = context.env();
  if (options.max_protocol_version < kMinHandshakeVersion ||
      options.max_protocol_version > kHandshakeVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("ConnectionOptions::max_protocol_version ",
                     options.max_protocol_version, " out of range ",
                     kMinHandshakeVersion, "..", kHandshakeVersion));
  }
  const Deadline deadline = env.DeadlineIn(options.handshake_timeout);
  uint16_t format = options.max_protocol_version;
  for (int attempt = 1;; ++attempt) {
    std::chrono::milliseconds retry_after{0};
    bool legacy_server = false;
    absl::StatusOr<std::unique_ptr<Connection>> connection =
        ConnectOnce(context, address, options, format, deadline, &retry_after,
                    &legacy_server);
    if (legacy_server) {
      format = kLegacyHandshakeVersion;  // once, at once
      continue;
    }
    if (connection.ok() || retry_after.count() == 0) return connection;
    const Deadline retry_at = env.DeadlineIn(retry_after);
    if (retry_at >= deadline) {
      return absl::UnavailableError(
          absl::StrCat(connection.status().message(), "; gave up after ",
                       attempt, " attempts within handshake_timeout (",
                       options.handshake_timeout.count(), " ms)"));
    }
    env.SleepUntil(retry_at);
  }
}

// One handshake in progress on the server side.
struct Listener::Pending {
  Socket socket;
  std::string peer;
  std::string source;  // the peer's address without its port
  Deadline deadline;
  bool awaiting_ready = false;
  // The frame format this peer speaks (known from its first header; REJECTs
  // before that go in format 2, which every peer reads).
  uint16_t format = kLegacyHandshakeVersion;
  std::vector<uint8_t> bytes;
  size_t needed = kHandshakeHeaderSize;
  std::unique_ptr<Connection> connection;
  // Protocol 3: the connection is a shell (QP in RESET, nothing registered)
  // that can serve another peer if this one never sends READY.
  bool recyclable = false;
  HandshakeMessage hello;  // protocol 3: kept until READY
  ConnectionPath path;
};

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

void Listener::Reject(Pending& pending, const std::string& reason,
                      uint64_t ListenerStats::*counter,
                      std::optional<uint32_t> retry_after_ms) {
  HandshakeMessage reject;
  reject.type = HandshakeType::kReject;
  reject.version = pending.format;
  reject.reason = reason.substr(0, kMaxReasonLength);
  for (char& c : reject.reason) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  if (pending.format >= kHandshakeVersion) {
    reject.retry_after_ms = retry_after_ms;
  }
  // Best effort: the peer may be gone or not reading.
  (void)SendFrame(env_, pending.socket.fd(), reject,
                  env_.DeadlineIn(std::chrono::milliseconds(100)));
  Forget(pending, counter, reason);
}

absl::StatusOr<std::unique_ptr<Connection>> Listener::TakeShell(
    std::string name) {
  if (!spare_.empty()) {
    std::unique_ptr<Connection> shell = std::move(spare_.back());
    spare_.pop_back();
    ConnectionSetup::Rename(*shell, std::move(name));
    // The stranger it was offered to saw its first PSN.
    ConnectionSetup::NewPsn(*shell);
    return shell;
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.shells_created;
  }
  return ConnectionSetup::CreateShell(context_, options_, std::move(name));
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

std::unique_ptr<Connection> Listener::Advance(Pending& pending) {
  // Read what has arrived, never past the current frame.
  while (pending.bytes.size() < pending.needed) {
    const size_t have = pending.bytes.size();
    pending.bytes.resize(pending.needed);
    absl::StatusOr<size_t> got = ReadAvailable(
        pending.socket.fd(), std::span<uint8_t>(pending.bytes).subspan(have));
    if (!got.ok()) {
      pending.bytes.resize(have);
      Forget(pending, &ListenerStats::abandoned,
             absl::StrCat("went away during the handshake after ", have,
                          " bytes"));
      return nullptr;
    }
    pending.bytes.resize(have + *got);
    if (*got == 0) return nullptr;  // wait for more
    if (pending.bytes.size() == kHandshakeHeaderSize) {
      absl::StatusOr<HandshakeHeader> header =
          DecodeHandshakeHeader(pending.bytes);
      if (!header.ok()) {
        Reject(pending, std::string(header.status().message()));
        return nullptr;
      }
      pending.needed = kHandshakeHeaderSize + header->body_length;
    }
  }
  absl::StatusOr<HandshakeMessage> message =
      DecodeHandshakeFrame(pending.bytes);
  pending.bytes.clear();
  pending.needed = kHandshakeHeaderSize;
  if (!message.ok()) {
    Reject(pending, std::string(message.status().message()));
    return nullptr;
  }

  if (pending.awaiting_ready) {
    if (message->type != HandshakeType::kReady) {
      Reject(pending, absl::StrCat("handshake: expected READY, got ",
                                   HandshakeTypeName(message->type)));
      return nullptr;
    }
    if (message->version != pending.format) {
      Reject(pending,
             absl::StrCat("handshake: READY in frame format ", message->version,
                          " after a format-", pending.format, " HELLO"));
      return nullptr;
    }
    if (pending.format >= kHandshakeVersion) {
      if (absl::Status status = Complete(pending); !status.ok()) {
        Reject(pending, absl::StrCat("server could not set up the QP: ",
                                     status.message()));
        return nullptr;
      }
    }
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.accepted;
    }
    // Kept open: its EOF is how this side learns the client process is gone.
    ConnectionSetup::AdoptSetupStream(*pending.connection,
                                      std::move(pending.socket));
    return std::move(pending.connection);
  }

  if (message->type != HandshakeType::kHello) {
    Reject(pending, absl::StrCat("handshake: expected HELLO, got ",
                                 HandshakeTypeName(message->type)));
    return nullptr;
  }
  pending.format = message->version;
  if (!SameToken(message->token, options_.token)) {
    Reject(pending, "handshake: wrong token");
    return nullptr;
  }
  std::string name = options_.name;
  if (name.empty()) {
    name = absl::StrCat("connection ", address_, " <- ", pending.peer);
  }
  if (pending.format < kHandshakeVersion)
    return AnswerLegacyHello(pending, *message, std::move(name));

  absl::StatusOr<uint16_t> version =
      ChooseHandshakeVersion(message->min_version, message->max_version);
  if (!version.ok()) {
    Reject(pending, std::string(version.status().message()));
    return nullptr;
  }
  if (*version < kHandshakeVersion) {
    Reject(pending,
           absl::StrCat("handshake: a format-3 HELLO must offer "
                        "protocol 3 or later, not ",
                        message->min_version, "..", message->max_version));
    return nullptr;
  }
  const ServerNegotiation negotiation = NegotiateAsServer(
      context_, *message, *version, listener_options_.traffic_policy);
  absl::StatusOr<std::unique_ptr<Connection>> shell = TakeShell(name);
  if (!shell.ok()) {
    Reject(pending, absl::StrCat("server could not set up the QP: ",
                                 shell.status().message()));
    return nullptr;
  }
  pending.connection = *std::move(shell);
  pending.recyclable = true;
  pending.hello = *std::move(message);
  pending.path = negotiation.path;
  if (absl::Status status = SendFrame(
          env_, pending.socket.fd(),
          OfferFor(*pending.connection, options_, HandshakeType::kAccept,
                   kHandshakeVersion, negotiation.accept_traffic, *version),
          pending.deadline);
      !status.ok()) {
    Forget(pending, &ListenerStats::abandoned, std::string(status.message()));
    return nullptr;
  }
  AwaitReady(pending);
  return nullptr;
}

void Listener::AwaitReady(Pending& pending) {
  pending.awaiting_ready = true;
  pending.deadline = std::min(pending.deadline,
                              env_.DeadlineIn(listener_options_.ready_timeout));
}

std::unique_ptr<Connection> Listener::AnswerLegacyHello(
    Pending& pending, const HandshakeMessage& hello, std::string name) {
  if (!listener_options_.accept_legacy_peers) {
    Reject(pending,
           "handshake: this server does not accept protocol-2 peers "
           "(ListenerOptions::accept_legacy_peers); upgrade the client");
    return nullptr;
  }
  // Protocol 2: the client may send as soon as it has READY out, so the
  // server's QP must be up, receives posted, before ACCEPT.
  const ServerNegotiation negotiation =
      NegotiateAsServer(context_, hello, kLegacyHandshakeVersion,
                        listener_options_.traffic_policy);
  absl::StatusOr<std::unique_ptr<Connection>> connection =
      ConnectionSetup::Create(context_, options_, std::move(name));
  if (connection.ok()) {
    absl::Status status =
        ConnectionSetup::Establish(**connection, hello, negotiation.path);
    if (!status.ok()) connection = status;
  }
  if (!connection.ok()) {
    Reject(pending, absl::StrCat("server could not set up the QP: ",
                                 connection.status().message()));
    return nullptr;
  }
  if (absl::Status status =
          SendFrame(env_, pending.socket.fd(),
                    OfferFor(**connection, options_, HandshakeType::kAccept,
                             kLegacyHandshakeVersion),
                    pending.deadline);
      !status.ok()) {
    Forget(pending, &ListenerStats::abandoned, std::string(status.message()));
    return nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.legacy_peers;
  }
  pending.connection = *std::move(connection);
  AwaitReady(pending);
  return nullptr;
}

absl::Status Listener::Complete(Pending& pending) {
  // The peer has proved it holds the token (if any) and answers: now the
  // rings are registered, receives posted and the QP brought up.
  pending.recyclable = false;
  Connection& connection = *pending.connection;
  if (absl::Status status = ConnectionSetup::CreateBuffers(connection);
      !status.ok()) {
    return status;
  }
  if (absl::Status status =
          ConnectionSetup::Establish(connection, pending.hello, pending.path);
      !status.ok()) {
    return status;
  }
  HandshakeMessage established;
  established.type = HandshakeType::kEstablished;
  const RemoteRegion probe = ConnectionSetup::ProbeTarget(connection);
  established.probe_address = probe.address;
  established.probe_rkey = probe.rkey;
  return SendFrame(env_, pending.socket.fd(), established, pending.deadline);
}

absl::StatusOr<std::unique_ptr<Connection>> Listener::Accept(
    Deadline deadline) {
  std::vector<pollfd> fds;
  std::vector<bool> readable;
  while (true) {
    // Expire silent sockets and handshakes that took too long.
    const uint64_t token = env_.PrepareWait();
    const Deadline now = env_.Now();
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
