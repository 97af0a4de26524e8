// File: transport/listener_handshake.cc
//
// The server side of the handshake, one pending socket at a time: reading
// a frame without blocking (Advance), checking the token, answering a
// protocol-3 HELLO with a pooled shell and ACCEPT, a protocol-2 HELLO the
// old way, READY with registered rings and ESTABLISHED, and REJECT with a
// reason. Which sockets get served is the admission tables' (listener.cc).

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "transport/connection_setup.h"
#include "transport/handshake.h"
#include "transport/handshake_io.h"
#include "transport/listener.h"
#include "transport/listener_pending.h"
#include "transport/negotiation.h"
#include "transport/tcp.h"

namespace rdma_transport {
namespace {

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

}  // namespace

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
  // What the peer sent and nobody read (a HELLO only peeked at, a READY in
  // flight) would make close() answer with a reset, which can destroy the
  // REJECT before the peer reads it: take it first, so the close is a FIN.
  uint8_t unread[kHandshakeHeaderSize + kMaxHandshakeBody];
  for (int i = 0; i < 4; ++i) {
    if (recv(pending.socket.fd(), unread, sizeof(unread), MSG_DONTWAIT) <= 0) {
      break;
    }
  }
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

}  // namespace rdma_transport
