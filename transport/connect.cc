// File: transport/connect.cc
//
// The client side of the handshake: Connect() (connect.h), one attempt at a
// time in the newest frame format the options allow, falling back to
// format 2 for a server that predates protocol 3 and retrying a busy
// server while handshake_timeout lasts.

#include "transport/connect.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "transport/connection_setup.h"
#include "transport/handshake.h"
#include "transport/handshake_io.h"
#include "transport/negotiation.h"
#include "transport/tcp.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

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

}  // namespace rdma_transport
