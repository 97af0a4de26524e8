#include "transport/handshake.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport {
namespace {

// The HELLO / ACCEPT body before the token: every field the header's table
// lists, qp_num through the reserved u16 after token_len. The token bytes
// follow this fixed part, so every field sits at a fixed offset.
constexpr size_t kEndpointFieldsSize = kEndpointBodySize;
// The REJECT body before the reason: reason_len.
constexpr size_t kReasonLengthSize = 2;
constexpr uint32_t kMaxQpNum = 0xFFFFFF;
constexpr uint32_t kMaxPsn = 0xFFFFFF;

static_assert(kEndpointFieldsSize + kMaxTokenLength <= kMaxHandshakeBody);
static_assert(kReasonLengthSize + kMaxReasonLength <= kMaxHandshakeBody);

bool IsKnownType(uint8_t type) {
  return type >= static_cast<uint8_t>(HandshakeType::kHello) &&
         type <= static_cast<uint8_t>(HandshakeType::kReject);
}

absl::Status Invalid(HandshakeType type, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("handshake ", HandshakeTypeName(type), ": ", what));
}

absl::Status UnknownType(unsigned type) {
  return absl::InvalidArgumentError(
      absl::StrCat("handshake: unknown type ", type,
                   " (expected 1 HELLO, 2 ACCEPT, 3 READY or 4 REJECT)"));
}

absl::Status OutOfRange(HandshakeType type, const char* field, int64_t value,
                        int64_t min, int64_t max) {
  return Invalid(
      type, absl::StrCat(field, " ", value, " out of range ", min, "..", max));
}

bool IsPrintable(uint8_t c) { return c >= 0x20 && c <= 0x7e; }

// What the body length of a `type` frame may be, before its fields are read:
// exact for ACCEPT and READY, a range for HELLO and REJECT. Shared by header
// and body decoding so a reader of a stream refuses a bad length before it
// waits for the body.
absl::Status CheckBodyLength(HandshakeType type, uint64_t length) {
  if (length > kMaxHandshakeBody) {
    return absl::InvalidArgumentError(
        absl::StrCat("handshake: body length ", length, " exceeds the maximum ",
                     kMaxHandshakeBody));
  }
  switch (type) {
    case HandshakeType::kHello:
      if (length < kEndpointFieldsSize) {
        return Invalid(type, absl::StrCat("body is ", length,
                                          " bytes, its fields need at least ",
                                          kEndpointFieldsSize));
      }
      if (length > kEndpointFieldsSize + kMaxTokenLength) {
        return Invalid(
            type,
            absl::StrCat("body is ", length, " bytes, its fields need at most ",
                         kEndpointFieldsSize + kMaxTokenLength, " (",
                         kEndpointFieldsSize, " + a token of up to ",
                         kMaxTokenLength, ")"));
      }
      return absl::OkStatus();
    case HandshakeType::kAccept:
      if (length != kEndpointFieldsSize) {
        return Invalid(
            type, absl::StrCat("body is ", length, " bytes, its fields need ",
                               kEndpointFieldsSize));
      }
      return absl::OkStatus();
    case HandshakeType::kReady:
      if (length != 0) {
        return Invalid(type,
                       absl::StrCat("body is ", length, " bytes, must be 0"));
      }
      return absl::OkStatus();
    case HandshakeType::kReject:
      if (length < kReasonLengthSize + 1 ||
          length > kReasonLengthSize + kMaxReasonLength) {
        return Invalid(
            type, absl::StrCat("body is ", length, " bytes, its fields need ",
                               kReasonLengthSize + 1, "..",
                               kReasonLengthSize + kMaxReasonLength,
                               " (reason_len and a reason of 1..",
                               kMaxReasonLength, " bytes)"));
      }
      return absl::OkStatus();
  }
  return UnknownType(static_cast<unsigned>(type));
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

std::span<const uint8_t> AsBytes(const std::string& text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

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

// Big-endian reads from a span whose length the caller has checked; each
// read is bounds-checked again all the same (returns 0 past the end and
// leaves the reader failed), so decoding never reads out of `bytes`.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint8_t U8() { return static_cast<uint8_t>(Take(1)); }
  uint16_t U16() { return static_cast<uint16_t>(Take(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Take(4)); }
  uint64_t U64() { return Take(8); }
  std::span<const uint8_t> Bytes(size_t n) {
    if (n > bytes_.size() - offset_) {
      failed_ = true;
      return {};
    }
    std::span<const uint8_t> out = bytes_.subspan(offset_, n);
    offset_ += n;
    return out;
  }
  bool failed() const { return failed_; }

 private:
  uint64_t Take(size_t n) {
    std::span<const uint8_t> bytes = Bytes(n);
    uint64_t value = 0;
    for (uint8_t b : bytes) value = (value << 8) | b;
    return value;
  }

  std::span<const uint8_t> bytes_;
  size_t offset_ = 0;
  bool failed_ = false;
};

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
  void U8(uint8_t v) { out_.push_back(v); }
  void U16(uint16_t v) {
    U8(static_cast<uint8_t>(v >> 8));
    U8(static_cast<uint8_t>(v));
  }
  void U32(uint32_t v) {
    U16(static_cast<uint16_t>(v >> 16));
    U16(static_cast<uint16_t>(v));
  }
  void U64(uint64_t v) {
    U32(static_cast<uint32_t>(v >> 32));
    U32(static_cast<uint32_t>(v));
  }
  void Bytes(std::span<const uint8_t> bytes) {
    out_.insert(out_.end(), bytes.begin(), bytes.end());
  }

 private:
  std::vector<uint8_t>& out_;
};

absl::Status CheckReserved(HandshakeType type, const char* field,
                           uint32_t value) {
  if (value == 0) return absl::OkStatus();
  return Invalid(type, absl::StrCat(field, " is ", value, ", must be 0"));
}

absl::StatusOr<HandshakeMessage> DecodeEndpointBody(
    HandshakeType type, std::span<const uint8_t> body) {
  Reader reader(body);
  HandshakeMessage message;
  message.type = type;
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
    return Invalid(
        type, absl::StrCat("body is ", body.size(), " bytes, its fields need ",
                           kEndpointFieldsSize));
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
  if (body.size() != kEndpointFieldsSize + token_len) {
    return Invalid(
        type,
        absl::StrCat("body is ", body.size(), " bytes, its fields need ",
                     kEndpointFieldsSize + token_len, " (", kEndpointFieldsSize,
                     " + token_len ", token_len, ")"));
  }
  std::span<const uint8_t> token = reader.Bytes(token_len);
  message.token.assign(reinterpret_cast<const char*>(token.data()),
                       token.size());
  return message;
}

absl::StatusOr<HandshakeMessage> DecodeRejectBody(
    std::span<const uint8_t> body) {
  constexpr HandshakeType type = HandshakeType::kReject;
  Reader reader(body);
  const uint16_t reason_len = reader.U16();
  if (reason_len < 1 || reason_len > kMaxReasonLength) {
    return OutOfRange(type, "reason_len", reason_len, 1, kMaxReasonLength);
  }
  if (reader.failed() || body.size() != kReasonLengthSize + reason_len) {
    return Invalid(
        type,
        absl::StrCat("body is ", body.size(), " bytes, its fields need ",
                     kReasonLengthSize + reason_len, " (", kReasonLengthSize,
                     " + reason_len ", reason_len, ")"));
  }
  std::span<const uint8_t> reason = reader.Bytes(reason_len);
  if (absl::Status status = CheckReason(type, reason); !status.ok()) {
    return status;
  }
  HandshakeMessage message;
  message.type = type;
  message.reason.assign(reinterpret_cast<const char*>(reason.data()),
                        reason.size());
  return message;
}

absl::Status CheckMessage(const HandshakeMessage& message) {
  const HandshakeType type = message.type;
  if (!IsKnownType(static_cast<uint8_t>(type))) {
    return UnknownType(static_cast<unsigned>(type));
  }
  if (type == HandshakeType::kHello || type == HandshakeType::kAccept) {
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
  return CheckReason(type, AsBytes(message.reason));
}

size_t BodySize(const HandshakeMessage& message) {
  switch (message.type) {
    case HandshakeType::kHello:
    case HandshakeType::kAccept:
      return kEndpointFieldsSize + message.token.size();
    case HandshakeType::kReady:
      return 0;
    case HandshakeType::kReject:
      return kReasonLengthSize + message.reason.size();
  }
  return 0;
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
  }
  return "UNKNOWN";
}

absl::StatusOr<std::vector<uint8_t>> EncodeHandshake(
    const HandshakeMessage& message) {
  if (absl::Status status = CheckMessage(message); !status.ok()) {
    return status;
  }
  const size_t body_size = BodySize(message);
  std::vector<uint8_t> out;
  out.reserve(kHandshakeHeaderSize + body_size);
  Writer writer(out);
  writer.U32(kHandshakeMagic);
  writer.U16(kHandshakeVersion);
  writer.U8(static_cast<uint8_t>(message.type));
  writer.U8(0);  // flags
  writer.U32(static_cast<uint32_t>(body_size));
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
      writer.Bytes(AsBytes(message.token));
      break;
    }
    case HandshakeType::kReady:
      break;
    case HandshakeType::kReject:
      writer.U16(static_cast<uint16_t>(message.reason.size()));
      writer.Bytes(AsBytes(message.reason));
      break;
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
  if (version != kHandshakeVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("handshake: peer speaks version ", version,
                     ", this side speaks ", kHandshakeVersion));
  }
  if (!IsKnownType(type)) return UnknownType(type);
  if (flags != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("handshake: flags 0x%02x must be 0", flags));
  }
  HandshakeHeader header;
  header.type = static_cast<HandshakeType>(type);
  header.body_length = length;
  if (absl::Status status = CheckBodyLength(header.type, length);
      !status.ok()) {
    return status;
  }
  return header;
}

absl::StatusOr<HandshakeMessage> DecodeHandshakeBody(
    const HandshakeHeader& header, std::span<const uint8_t> body) {
  const HandshakeType type = header.type;
  if (!IsKnownType(static_cast<uint8_t>(type))) {
    return UnknownType(static_cast<unsigned>(type));
  }
  if (body.size() != header.body_length) {
    return Invalid(
        type, absl::StrCat("body is ", body.size(),
                           " bytes but the header says ", header.body_length));
  }
  if (absl::Status status = CheckBodyLength(type, body.size()); !status.ok()) {
    return status;
  }
  switch (type) {
    case HandshakeType::kHello:
    case HandshakeType::kAccept:
      return DecodeEndpointBody(type, body);
    case HandshakeType::kReady: {
      HandshakeMessage message;
      message.type = type;
      return message;
    }
    case HandshakeType::kReject:
      return DecodeRejectBody(body);
  }
  return UnknownType(static_cast<unsigned>(type));
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

}  // namespace rdma_transport
