// File: transport/handshake.cc
//
// The handshake frame codec (handshake.h): headers, the fixed fields of
// each frame type, encoding and decoding whole frames, and choosing the
// protocol version. The value checks are handshake_checks.cc's, the
// extensions handshake_extensions.cc's.

#include "transport/handshake.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "transport/handshake_checks.h"
#include "transport/handshake_extensions.h"
#include "transport/handshake_wire.h"

namespace rdma_transport {
namespace {

using handshake_internal::AsBytes;
using handshake_internal::CheckBodyLength;
using handshake_internal::CheckEndpoint;
using handshake_internal::CheckFormatAndType;
using handshake_internal::CheckMessage;
using handshake_internal::CheckReason;
using handshake_internal::CheckReserved;
using handshake_internal::CheckTokenLength;
using handshake_internal::DecodeExtensions;
using handshake_internal::Invalid;
using handshake_internal::IsKnownType;
using handshake_internal::IsPrintable;
using handshake_internal::kEndpointFieldsSize;
using handshake_internal::kReasonLengthSize;
using handshake_internal::OutOfRange;
using handshake_internal::Reader;
using handshake_internal::UnknownType;
using handshake_internal::WriteExtensions;
using handshake_internal::Writer;

// Why a wrong magic might be what it is: other protocols on the same port are
// the usual cause, and their first bytes are recognisable.
std::string BadMagic(uint32_t magic, std::span<const uint8_t, 4> bytes) {
  std::string message =
      absl::StrFormat("handshake: bad magic 0x%08x (expected 0x%08x \"RDTP\")",
                      magic, kHandshakeMagic);
  if (magic == __builtin_bswap32(kHandshakeMagic)) {
    absl::StrAppend(&message,
                    "; it is byte-swapped: does the peer write it "
                    "little-endian?");
    return message;
  }
  bool printable = true;
  for (uint8_t c : bytes) printable = printable && IsPrintable(c);
  const std::string ascii =
      printable ? std::string(reinterpret_cast<const char*>(bytes.data()), 4)
                : std::string();
  static constexpr const char* kHttp[] = {"GET ", "POST", "PUT ", "HEAD",
                                          "DELE", "OPTI", "PATC", "CONN",
                                          "TRAC", "HTTP", "PRI "};
  if (printable) {
    for (const char* prefix : kHttp) {
      if (ascii == prefix) {
        absl::StrAppend(&message, "; is the peer speaking HTTP? (it sent \"",
                        ascii, "\")");
        return message;
      }
    }
    if (ascii == "SSH-") {
      absl::StrAppend(&message, "; is the peer speaking SSH? (it sent \"",
                      ascii, "\")");
      return message;
    }
    absl::StrAppend(&message, "; the peer sent ASCII \"", ascii, "\"");
    return message;
  }
  if (bytes[0] == 0x16 && bytes[1] == 0x03) {
    absl::StrAppend(&message,
                    "; is the peer speaking TLS? (0x16 0x03 starts a TLS "
                    "handshake record)");
  }
  return message;
}

absl::Status DecodeVersionRange(HandshakeType type, Reader& reader,
                                HandshakeMessage& message) {
  message.min_version = reader.U16();
  message.max_version = reader.U16();
  if (message.min_version < 1 || message.min_version > message.max_version) {
    return Invalid(
        type, absl::StrCat("version range ", message.min_version, "..",
                           message.max_version, " is empty or starts at 0"));
  }
  if (type == HandshakeType::kAccept &&
      message.min_version != message.max_version) {
    return Invalid(type, absl::StrCat("version range ", message.min_version,
                                      "..", message.max_version,
                                      ": an ACCEPT names one version"));
  }
  return absl::OkStatus();
}

absl::StatusOr<HandshakeMessage> DecodeEndpointBody(
    uint16_t version, HandshakeType type, std::span<const uint8_t> body) {
  const bool legacy = version < kHandshakeVersion;
  const size_t fields_size =
      kEndpointFieldsSize + (legacy ? 0 : kVersionRangeSize);
  Reader reader(body);
  HandshakeMessage message;
  message.type = type;
  message.version = version;
  if (legacy) {
    // A format-2 frame carries no range: its sender speaks protocol 2 only.
    message.min_version = kLegacyHandshakeVersion;
    message.max_version = kLegacyHandshakeVersion;
  }
  QpEndpoint& endpoint = message.endpoint;
  endpoint.qp_num = reader.U32();
  endpoint.psn = reader.U32();
  std::span<const uint8_t> gid = reader.Bytes(sizeof(endpoint.gid.raw));
  if (!gid.empty()) std::memcpy(endpoint.gid.raw, gid.data(), gid.size());
  endpoint.lid = reader.U16();
  endpoint.port = reader.U8();
  const uint8_t reserved_after_port = reader.U8();
  endpoint.mtu = reader.U16();
  const uint16_t reserved_after_mtu = reader.U16();
  message.recv_slots = reader.U32();
  message.slot_size = reader.U32();
  message.probe_address = reader.U64();
  message.probe_rkey = reader.U32();
  const uint32_t reserved_after_probe = reader.U32();
  const uint16_t token_len = reader.U16();
  const uint16_t reserved_after_token_len = reader.U16();
  if (reader.failed()) {
    // CheckBodyLength() makes this unreachable.
    return Invalid(type, absl::StrCat("body is ", body.size(),
                                      " bytes, its fields need ", fields_size));
  }

  if (absl::Status status =
          CheckEndpoint(type, endpoint, message.recv_slots, message.slot_size);
      !status.ok()) {
    return status;
  }
  if (absl::Status status =
          CheckReserved(type, "reserved byte after port", reserved_after_port);
      !status.ok()) {
    return status;
  }
  if (absl::Status status =
          CheckReserved(type, "reserved u16 after mtu", reserved_after_mtu);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckReserved(type, "reserved u32 after probe_rkey",
                                          reserved_after_probe);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckReserved(type, "reserved u16 after token_len",
                                          reserved_after_token_len);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckTokenLength(type, token_len); !status.ok()) {
    return status;
  }
  if (!legacy) {
    if (absl::Status status = DecodeVersionRange(type, reader, message);
        !status.ok()) {
      return status;
    }
  }
  if (legacy ? body.size() != fields_size + token_len
             : body.size() < fields_size + token_len) {
    return Invalid(
        type, absl::StrCat("body is ", body.size(), " bytes, its fields need ",
                           legacy ? "" : "at least ", fields_size + token_len,
                           " (", fields_size, " + token_len ", token_len, ")"));
  }
  std::span<const uint8_t> token = reader.Bytes(token_len);
  message.token.assign(reinterpret_cast<const char*>(token.data()),
                       token.size());
  if (!legacy) {
    if (absl::Status status = DecodeExtensions(
            type, body.subspan(fields_size + token_len), message);
        !status.ok()) {
      return status;
    }
  }
  return message;
}

absl::StatusOr<HandshakeMessage> DecodeEstablishedBody(
    std::span<const uint8_t> body) {
  constexpr HandshakeType type = HandshakeType::kEstablished;
  Reader reader(body);
  HandshakeMessage message;
  message.type = type;
  message.version = kHandshakeVersion;
  message.probe_address = reader.U64();
  message.probe_rkey = reader.U32();
  if (absl::Status status =
          CheckReserved(type, "reserved u32 after probe_rkey", reader.U32());
      !status.ok()) {
    return status;
  }
  if (absl::Status status =
          DecodeExtensions(type, body.subspan(kEstablishedBodySize), message);
      !status.ok()) {
    return status;
  }
  return message;
}

absl::StatusOr<HandshakeMessage> DecodeRejectBody(
    uint16_t version, std::span<const uint8_t> body) {
  constexpr HandshakeType type = HandshakeType::kReject;
  Reader reader(body);
  const uint16_t reason_len = reader.U16();
  if (reason_len < 1 || reason_len > kMaxReasonLength) {
    return OutOfRange(type, "reason_len", reason_len, 1, kMaxReasonLength);
  }
  const bool legacy = version < kHandshakeVersion;
  const size_t needed = kReasonLengthSize + reason_len;
  if (reader.failed() ||
      (legacy ? body.size() != needed : body.size() < needed)) {
    return Invalid(
        type,
        absl::StrCat("body is ", body.size(), " bytes, its fields need ",
                     legacy ? "" : "at least ", needed, " (", kReasonLengthSize,
                     " + reason_len ", reason_len, ")"));
  }
  std::span<const uint8_t> reason = reader.Bytes(reason_len);
  if (absl::Status status = CheckReason(type, reason); !status.ok()) {
    return status;
  }
  HandshakeMessage message;
  message.type = type;
  message.version = version;
  message.reason.assign(reinterpret_cast<const char*>(reason.data()),
                        reason.size());
  if (!legacy) {
    if (absl::Status status =
            DecodeExtensions(type, body.subspan(needed), message);
        !status.ok()) {
      return status;
    }
  }
  return message;
}

}  // namespace

const char* HandshakeTypeName(HandshakeType type) {
  switch (type) {
    case HandshakeType::kHello:
      return "HELLO";
    case HandshakeType::kAccept:
      return "ACCEPT";
    case HandshakeType::kReady:
      return "READY";
    case HandshakeType::kReject:
      return "REJECT";
    case HandshakeType::kEstablished:
      return "ESTABLISHED";
  }
  return "UNKNOWN";
}

absl::StatusOr<std::vector<uint8_t>> EncodeHandshake(
    const HandshakeMessage& message) {
  if (absl::Status status = CheckMessage(message); !status.ok()) {
    return status;
  }
  const bool legacy = message.version < kHandshakeVersion;
  std::vector<uint8_t> out;
  out.reserve(kHandshakeHeaderSize + kEndpointBodySize + kVersionRangeSize +
              message.token.size() + 32);
  Writer writer(out);
  writer.U32(kHandshakeMagic);
  writer.U16(message.version);
  writer.U8(static_cast<uint8_t>(message.type));
  writer.U8(0);   // flags
  writer.U32(0);  // the body length, set below
  switch (message.type) {
    case HandshakeType::kHello:
    case HandshakeType::kAccept: {
      const QpEndpoint& endpoint = message.endpoint;
      writer.U32(endpoint.qp_num);
      writer.U32(endpoint.psn);
      writer.Bytes(endpoint.gid.raw);
      writer.U16(endpoint.lid);
      writer.U8(endpoint.port);
      writer.U8(0);
      writer.U16(static_cast<uint16_t>(endpoint.mtu));
      writer.U16(0);
      writer.U32(message.recv_slots);
      writer.U32(message.slot_size);
      writer.U64(message.probe_address);
      writer.U32(message.probe_rkey);
      writer.U32(0);
      writer.U16(static_cast<uint16_t>(message.token.size()));
      writer.U16(0);
      if (!legacy) {
        writer.U16(message.min_version);
        writer.U16(message.max_version);
      }
      writer.Bytes(AsBytes(message.token));
      break;
    }
    case HandshakeType::kReady:
      break;
    case HandshakeType::kEstablished:
      writer.U64(message.probe_address);
      writer.U32(message.probe_rkey);
      writer.U32(0);
      break;
    case HandshakeType::kReject:
      writer.U16(static_cast<uint16_t>(message.reason.size()));
      writer.Bytes(AsBytes(message.reason));
      break;
  }
  if (!legacy) WriteExtensions(message, writer);
  const size_t body_size = out.size() - kHandshakeHeaderSize;
  if (body_size > kMaxHandshakeBody) {
    return Invalid(message.type, absl::StrCat("body would be ", body_size,
                                              " bytes, more than the maximum ",
                                              kMaxHandshakeBody));
  }
  for (int i = 0; i < 4; ++i) {
    out[8 + i] = static_cast<uint8_t>(body_size >> (24 - 8 * i));
  }
  return out;
}

absl::StatusOr<HandshakeHeader> DecodeHandshakeHeader(
    std::span<const uint8_t> bytes) {
  if (bytes.size() < kHandshakeHeaderSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("handshake: truncated header: ", bytes.size(), " of ",
                     kHandshakeHeaderSize, " bytes"));
  }
  if (bytes.size() > kHandshakeHeaderSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("handshake: header is ", bytes.size(),
                     " bytes, expected exactly ", kHandshakeHeaderSize));
  }
  Reader reader(bytes);
  const uint32_t magic = reader.U32();
  const uint16_t version = reader.U16();
  const uint8_t type = reader.U8();
  const uint8_t flags = reader.U8();
  const uint32_t length = reader.U32();
  if (magic != kHandshakeMagic) {
    return absl::InvalidArgumentError(BadMagic(magic, bytes.first<4>()));
  }
  if (version != kLegacyHandshakeVersion && version != kHandshakeVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("handshake: peer speaks frame format ", version,
                     ", this side speaks formats ", kLegacyHandshakeVersion,
                     " and ", kHandshakeVersion, " (protocol versions ",
                     kMinHandshakeVersion, "..", kHandshakeVersion, ")"));
  }
  if (!IsKnownType(version, type)) return UnknownType(version, type);
  if (flags != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("handshake: flags 0x%02x must be 0", flags));
  }
  HandshakeHeader header;
  header.type = static_cast<HandshakeType>(type);
  header.version = version;
  header.body_length = length;
  if (absl::Status status = CheckBodyLength(version, header.type, length);
      !status.ok()) {
    return status;
  }
  return header;
}

absl::StatusOr<HandshakeMessage> DecodeHandshakeBody(
    const HandshakeHeader& header, std::span<const uint8_t> body) {
  const HandshakeType type = header.type;
  const uint16_t version = header.version;
  if (absl::Status status = CheckFormatAndType(version, type); !status.ok()) {
    return status;
  }
  if (body.size() != header.body_length) {
    return Invalid(
        type, absl::StrCat("body is ", body.size(),
                           " bytes but the header says ", header.body_length));
  }
  if (absl::Status status = CheckBodyLength(version, type, body.size());
      !status.ok()) {
    return status;
  }
  switch (type) {
    case HandshakeType::kHello:
    case HandshakeType::kAccept:
      return DecodeEndpointBody(version, type, body);
    case HandshakeType::kReady: {
      HandshakeMessage message;
      message.type = type;
      message.version = version;
      if (absl::Status status = DecodeExtensions(type, body, message);
          !status.ok()) {
        return status;
      }
      return message;
    }
    case HandshakeType::kEstablished:
      return DecodeEstablishedBody(body);
    case HandshakeType::kReject:
      return DecodeRejectBody(version, body);
  }
  return UnknownType(version, static_cast<unsigned>(type));
}

absl::StatusOr<HandshakeMessage> DecodeHandshakeFrame(
    std::span<const uint8_t> bytes) {
  absl::StatusOr<HandshakeHeader> header = DecodeHandshakeHeader(
      bytes.first(std::min(bytes.size(), kHandshakeHeaderSize)));
  if (!header.ok()) return header.status();
  // body_length <= kMaxHandshakeBody: no overflow.
  const size_t frame_size = kHandshakeHeaderSize + header->body_length;
  if (bytes.size() < frame_size) {
    return Invalid(
        header->type,
        absl::StrCat("truncated body: ", bytes.size() - kHandshakeHeaderSize,
                     " of ", header->body_length, " bytes"));
  }
  if (bytes.size() > frame_size) {
    return Invalid(header->type, absl::StrCat(bytes.size() - frame_size,
                                              " trailing bytes after the ",
                                              frame_size, "-byte frame"));
  }
  return DecodeHandshakeBody(*header, bytes.subspan(kHandshakeHeaderSize));
}

absl::StatusOr<uint16_t> ChooseHandshakeVersion(uint16_t peer_min,
                                                uint16_t peer_max) {
  const uint16_t chosen = std::min(peer_max, kHandshakeVersion);
  if (peer_min > peer_max ||
      chosen < std::max(peer_min, kMinHandshakeVersion)) {
    return absl::FailedPreconditionError(
        absl::StrCat("handshake: the peer speaks protocol versions ", peer_min,
                     "..", peer_max, ", this side ", kMinHandshakeVersion, "..",
                     kHandshakeVersion, ": none in common"));
  }
  return chosen;
}

}  // namespace rdma_transport
