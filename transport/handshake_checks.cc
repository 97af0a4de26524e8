// File: transport/handshake_checks.cc
//
// The value checks encoding and decoding of handshake frames share
// (handshake_checks.h).

#include "transport/handshake_checks.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "transport/handshake_extensions.h"
#include "transport/handshake_wire.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport {
namespace handshake_internal {
namespace {

constexpr uint32_t kMaxQpNum = 0xFFFFFF;
constexpr uint32_t kMaxPsn = 0xFFFFFF;

}  // namespace

bool IsKnownType(uint16_t version, uint8_t type) {
  const uint8_t last = version >= kHandshakeVersion
                           ? static_cast<uint8_t>(HandshakeType::kEstablished)
                           : static_cast<uint8_t>(HandshakeType::kReject);
  return type >= static_cast<uint8_t>(HandshakeType::kHello) && type <= last;
}

absl::Status UnknownType(uint16_t version, unsigned type) {
  return absl::InvalidArgumentError(
      absl::StrCat("handshake: unknown type ", type, " in a format-", version,
                   " frame (expected 1 HELLO, 2 ACCEPT, 3 READY, 4 REJECT",
                   version >= kHandshakeVersion ? " or 5 ESTABLISHED)" : ")"));
}

// What the body length of a `type` frame of `version` may be, before its
// fields are read: exact for format-2 ACCEPT and READY, a range otherwise.
// Shared by header and body decoding so a reader of a stream refuses a bad
// length before it waits for the body.
absl::Status CheckBodyLength(uint16_t version, HandshakeType type,
                             uint64_t length) {
  if (length > kMaxHandshakeBody) {
    return absl::InvalidArgumentError(
        absl::StrCat("handshake: body length ", length, " exceeds the maximum ",
                     kMaxHandshakeBody));
  }
  const bool legacy = version < kHandshakeVersion;
  const size_t endpoint_fields =
      kEndpointFieldsSize + (legacy ? 0 : kVersionRangeSize);
  switch (type) {
    case HandshakeType::kHello:
      if (length < endpoint_fields) {
        return Invalid(type, absl::StrCat("body is ", length,
                                          " bytes, its fields need at least ",
                                          endpoint_fields));
      }
      if (legacy && length > endpoint_fields + kMaxTokenLength) {
        return Invalid(
            type, absl::StrCat(
                      "body is ", length, " bytes, its fields need at most ",
                      endpoint_fields + kMaxTokenLength, " (", endpoint_fields,
                      " + a token of up to ", kMaxTokenLength, ")"));
      }
      return absl::OkStatus();
    case HandshakeType::kAccept:
      if (legacy ? length != endpoint_fields : length < endpoint_fields) {
        return Invalid(
            type, absl::StrCat("body is ", length, " bytes, its fields need ",
                               legacy ? "" : "at least ", endpoint_fields));
      }
      return absl::OkStatus();
    case HandshakeType::kReady:
      if (legacy && length != 0) {
        return Invalid(type,
                       absl::StrCat("body is ", length, " bytes, must be 0"));
      }
      return absl::OkStatus();
    case HandshakeType::kEstablished:
      if (legacy) return UnknownType(version, static_cast<unsigned>(type));
      if (length < kEstablishedBodySize) {
        return Invalid(type, absl::StrCat("body is ", length,
                                          " bytes, its fields need at least ",
                                          kEstablishedBodySize));
      }
      return absl::OkStatus();
    case HandshakeType::kReject:
      if (length < kReasonLengthSize + 1 ||
          (legacy && length > kReasonLengthSize + kMaxReasonLength)) {
        return Invalid(
            type, absl::StrCat("body is ", length, " bytes, its fields need ",
                               kReasonLengthSize + 1, "..",
                               kReasonLengthSize + kMaxReasonLength,
                               " (reason_len and a reason of 1..",
                               kMaxReasonLength, " bytes)"));
      }
      return absl::OkStatus();
  }
  return UnknownType(version, static_cast<unsigned>(type));
}

// The value checks HELLO and ACCEPT share, for encoding and decoding alike.
absl::Status CheckEndpoint(HandshakeType type, const QpEndpoint& endpoint,
                           uint32_t recv_slots, uint32_t slot_size) {
  if (endpoint.qp_num < 1 || endpoint.qp_num > kMaxQpNum) {
    return OutOfRange(type, "qp_num", endpoint.qp_num, 1, kMaxQpNum);
  }
  if (endpoint.psn > kMaxPsn) {
    return OutOfRange(type, "psn", endpoint.psn, 0, kMaxPsn);
  }
  if (endpoint.port < 1) {
    return OutOfRange(type, "port", endpoint.port, 1, 255);
  }
  if (!MtuFromBytes(endpoint.mtu).has_value()) {
    return Invalid(type, absl::StrCat("mtu ", endpoint.mtu,
                                      " is not one of 256, 512, 1024, 2048, "
                                      "4096"));
  }
  if (recv_slots < kMinRecvSlots || recv_slots > kMaxRecvSlots) {
    return OutOfRange(type, "recv_slots", recv_slots, kMinRecvSlots,
                      kMaxRecvSlots);
  }
  if (slot_size > kMaxSlotSize) {
    return OutOfRange(type, "slot_size", slot_size, 0, kMaxSlotSize);
  }
  return absl::OkStatus();
}

absl::Status CheckTokenLength(HandshakeType type, size_t token_len) {
  if (type == HandshakeType::kHello) {
    if (token_len > kMaxTokenLength) {
      return OutOfRange(type, "token_len", token_len, 0, kMaxTokenLength);
    }
  } else if (token_len != 0) {
    return Invalid(type, absl::StrCat("token_len ", token_len,
                                      " must be 0 (only HELLO carries a "
                                      "token)"));
  }
  return absl::OkStatus();
}

absl::Status CheckReason(HandshakeType type, std::span<const uint8_t> reason) {
  if (type != HandshakeType::kReject) {
    if (!reason.empty()) {
      return Invalid(type, absl::StrCat("reason_len ", reason.size(),
                                        " must be 0 (only REJECT carries a "
                                        "reason)"));
    }
    return absl::OkStatus();
  }
  if (reason.size() < 1 || reason.size() > kMaxReasonLength) {
    return OutOfRange(type, "reason_len", reason.size(), 1, kMaxReasonLength);
  }
  for (size_t i = 0; i < reason.size(); ++i) {
    if (!IsPrintable(reason[i])) {
      return Invalid(type,
                     absl::StrFormat("reason byte 0x%02x at offset %d is not "
                                     "printable ASCII (0x20..0x7e)",
                                     reason[i], i));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFormatAndType(uint16_t version, HandshakeType type) {
  if (version != kLegacyHandshakeVersion && version != kHandshakeVersion) {
    return Invalid(
        type, absl::StrCat("frame format ", version, " is not ",
                           kLegacyHandshakeVersion, " or ", kHandshakeVersion));
  }
  if (!IsKnownType(version, static_cast<uint8_t>(type))) {
    return UnknownType(version, static_cast<unsigned>(type));
  }
  return absl::OkStatus();
}

absl::Status CheckMessage(const HandshakeMessage& message) {
  const HandshakeType type = message.type;
  const uint16_t version = message.version;
  if (absl::Status status = CheckFormatAndType(version, type); !status.ok()) {
    return status;
  }
  const bool endpoint =
      type == HandshakeType::kHello || type == HandshakeType::kAccept;
  if (endpoint) {
    if (absl::Status status = CheckEndpoint(
            type, message.endpoint, message.recv_slots, message.slot_size);
        !status.ok()) {
      return status;
    }
  }
  if (absl::Status status = CheckTokenLength(type, message.token.size());
      !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckReason(type, AsBytes(message.reason));
      !status.ok()) {
    return status;
  }
  if (version == kLegacyHandshakeVersion) {
    if (HasExtensions(message)) {
      return Invalid(type, "a format-2 frame carries no extensions");
    }
    return absl::OkStatus();
  }
  if (endpoint) {
    if (message.min_version < 1 || message.min_version > message.max_version ||
        (type == HandshakeType::kAccept &&
         message.min_version != message.max_version)) {
      return Invalid(type,
                     absl::StrCat("version range ", message.min_version, "..",
                                  message.max_version, " is not valid here"));
    }
  }
  return CheckExtensions(message);
}

}  // namespace handshake_internal
}  // namespace rdma_transport
