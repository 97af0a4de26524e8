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

bool IsKnownType(uint16_t version, uint8_t type) {
  const uint8_t last = version >= kHandshakeVersion
                           ? static_cast<uint8_t>(HandshakeType::kEstablished)
                           : static_cast<uint8_t>(HandshakeType::kReject);
  return type >= static_cast<uint8_t>(HandshakeType::kHello) && type <= last;
}

absl::Status Invalid(HandshakeType type, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("handshake ", HandshakeTypeName(type), ": ", what));
}

absl::Status UnknownType(uint16_t version, unsigned type) {
  return absl::InvalidArgumentError(
      absl::StrCat("handshake: unknown type ", type, " in a format-", version,
                   " frame (expected 1 HELLO, 2 ACCEPT, 3 READY, 4 REJECT",
                   version >= kHandshakeVersion ? " or 5 ESTABLISHED)" : ")"));
}

absl::Status OutOfRange(HandshakeType type, const char* field, int64_t value,
                        int64_t min, int64_t max) {
  return Invalid(
      type, absl::StrCat(field, " ", value, " out of range ", min, "..", max));
}

bool IsPrintable(uint8_t c) { return c >= 0x20 && c <= 0x7e; }

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

const char* ExtensionName(uint16_t type) {
  switch (static_cast<HandshakeExtensionType>(type)) {
    case HandshakeExtensionType::kReadDepth:
      return "READ_DEPTH";
    case HandshakeExtensionType::kTraffic:
      return "TRAFFIC";
    case HandshakeExtensionType::kRetryAfter:
      return "RETRY_AFTER";
  }
  return nullptr;
}

constexpr size_t kKnownExtensionSize = 4;

// Whether a known extension may appear in a `type` frame.
bool BelongsTo(HandshakeExtensionType extension, HandshakeType type) {
  switch (extension) {
    case HandshakeExtensionType::kReadDepth:
    case HandshakeExtensionType::kTraffic:
      return type == HandshakeType::kHello || type == HandshakeType::kAccept;
    case HandshakeExtensionType::kRetryAfter:
      return type == HandshakeType::kReject;
  }
  return false;
}

absl::Status CheckReadDepth(HandshakeType type, const ReadDepth& depth) {
  if (depth.initiator < 1) {
    return OutOfRange(type, "READ_DEPTH initiator", depth.initiator, 1, 255);
  }
  if (depth.responder < 1) {
    return OutOfRange(type, "READ_DEPTH responder", depth.responder, 1, 255);
  }
  return absl::OkStatus();
}

absl::Status CheckTraffic(HandshakeType type, const TrafficSettings& traffic) {
  if (traffic.service_level.has_value() && *traffic.service_level > 15) {
    return OutOfRange(type, "TRAFFIC service_level", *traffic.service_level, 0,
                      15);
  }
  return absl::OkStatus();
}

absl::Status CheckRetryAfter(HandshakeType type, uint32_t ms) {
  if (ms < 1 || ms > kMaxRetryAfterMs) {
    return OutOfRange(type, "RETRY_AFTER milliseconds", ms, 1,
                      kMaxRetryAfterMs);
  }
  return absl::OkStatus();
}

// Decodes one known extension's value into `message`.
absl::Status DecodeKnownExtension(HandshakeType type,
                                  HandshakeExtensionType extension,
                                  std::span<const uint8_t> value,
                                  HandshakeMessage& message) {
  Reader reader(value);
  switch (extension) {
    case HandshakeExtensionType::kReadDepth: {
      ReadDepth depth;
      depth.initiator = reader.U8();
      depth.responder = reader.U8();
      if (absl::Status status =
              CheckReserved(type, "READ_DEPTH reserved u16", reader.U16());
          !status.ok()) {
        return status;
      }
      if (absl::Status status = CheckReadDepth(type, depth); !status.ok()) {
        return status;
      }
      message.read_depth = depth;
      return absl::OkStatus();
    }
    case HandshakeExtensionType::kTraffic: {
      const uint8_t flags = reader.U8();
      const uint8_t traffic_class = reader.U8();
      const uint8_t service_level = reader.U8();
      const uint8_t reserved = reader.U8();
      if (flags & ~0x3) {
        return Invalid(type, absl::StrFormat("TRAFFIC flags 0x%02x: only bits "
                                             "0 and 1 are defined",
                                             flags));
      }
      if (!(flags & 1) && traffic_class != 0) {
        return Invalid(type,
                       absl::StrCat("TRAFFIC traffic_class ", traffic_class,
                                    " must be 0 when flag bit 0 is "
                                    "clear"));
      }
      if (!(flags & 2) && service_level != 0) {
        return Invalid(type,
                       absl::StrCat("TRAFFIC service_level ", service_level,
                                    " must be 0 when flag bit 1 is "
                                    "clear"));
      }
      if (absl::Status status =
              CheckReserved(type, "TRAFFIC reserved byte", reserved);
          !status.ok()) {
        return status;
      }
      TrafficSettings traffic;
      if (flags & 1) traffic.traffic_class = traffic_class;
      if (flags & 2) traffic.service_level = service_level;
      if (absl::Status status = CheckTraffic(type, traffic); !status.ok()) {
        return status;
      }
      message.traffic = traffic;
      return absl::OkStatus();
    }
    case HandshakeExtensionType::kRetryAfter: {
      const uint32_t ms = reader.U32();
      if (absl::Status status = CheckRetryAfter(type, ms); !status.ok()) {
        return status;
      }
      message.retry_after_ms = ms;
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

// The extensions that end a format-3 body.
absl::Status DecodeExtensions(HandshakeType type,
                              std::span<const uint8_t> bytes,
                              HandshakeMessage& message) {
  Reader reader(bytes);
  int previous = -1;
  size_t offset = 0;
  while (offset < bytes.size()) {
    if (bytes.size() - offset < kExtensionHeaderSize) {
      return Invalid(type, absl::StrCat("truncated extension header: ",
                                        bytes.size() - offset, " of ",
                                        kExtensionHeaderSize, " bytes"));
    }
    const uint16_t ext_type = reader.U16();
    const uint16_t length = reader.U16();
    offset += kExtensionHeaderSize;
    if (static_cast<int>(ext_type) <= previous) {
      return Invalid(
          type,
          absl::StrCat("extension type ", ext_type, " after type ", previous,
                       ": types must ascend, each at most once"));
    }
    previous = ext_type;
    if (length > bytes.size() - offset) {
      return Invalid(
          type, absl::StrCat("extension type ", ext_type, " says ", length,
                             " bytes, ", bytes.size() - offset, " remain"));
    }
    std::span<const uint8_t> value = reader.Bytes(length);
    offset += length;
    const char* name = ExtensionName(ext_type);
    if (name == nullptr) {
      if (ext_type & kCriticalExtension) {
        return Invalid(type,
                       absl::StrFormat("unknown critical extension 0x%04x "
                                       "(the peer requires a feature this "
                                       "side does not have)",
                                       ext_type));
      }
      message.unknown_extensions.push_back(
          {ext_type, std::vector<uint8_t>(value.begin(), value.end())});
      continue;
    }
    const auto known = static_cast<HandshakeExtensionType>(ext_type);
    if (!BelongsTo(known, type)) {
      return Invalid(type, absl::StrCat("extension ", name,
                                        " does not belong in this frame"));
    }
    if (length != kKnownExtensionSize) {
      return Invalid(type,
                     absl::StrCat("extension ", name, " is ", length,
                                  " bytes, must be ", kKnownExtensionSize));
    }
    if (absl::Status status = DecodeKnownExtension(type, known, value, message);
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
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

bool HasExtensions(const HandshakeMessage& message) {
  return message.read_depth.has_value() || message.traffic.has_value() ||
         message.retry_after_ms.has_value() ||
         !message.unknown_extensions.empty();
}

absl::Status CheckMessage(const HandshakeMessage& message) {
  const HandshakeType type = message.type;
  const uint16_t version = message.version;
  if (version != kLegacyHandshakeVersion && version != kHandshakeVersion) {
    return Invalid(
        type, absl::StrCat("frame format ", version, " is not ",
                           kLegacyHandshakeVersion, " or ", kHandshakeVersion));
  }
  if (!IsKnownType(version, static_cast<uint8_t>(type))) {
    return UnknownType(version, static_cast<unsigned>(type));
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
  auto misplaced = [&](HandshakeExtensionType extension) {
    return Invalid(type,
                   absl::StrCat("extension ",
                                ExtensionName(static_cast<uint16_t>(extension)),
                                " does not belong in this frame"));
  };
  if (message.read_depth.has_value()) {
    if (!BelongsTo(HandshakeExtensionType::kReadDepth, type)) {
      return misplaced(HandshakeExtensionType::kReadDepth);
    }
    if (absl::Status status = CheckReadDepth(type, *message.read_depth);
        !status.ok()) {
      return status;
    }
  }
  if (message.traffic.has_value()) {
    if (!BelongsTo(HandshakeExtensionType::kTraffic, type)) {
      return misplaced(HandshakeExtensionType::kTraffic);
    }
    if (absl::Status status = CheckTraffic(type, *message.traffic);
        !status.ok()) {
      return status;
    }
  }
  if (message.retry_after_ms.has_value()) {
    if (!BelongsTo(HandshakeExtensionType::kRetryAfter, type)) {
      return misplaced(HandshakeExtensionType::kRetryAfter);
    }
    if (absl::Status status = CheckRetryAfter(type, *message.retry_after_ms);
        !status.ok()) {
      return status;
    }
  }
  int previous = -1;
  for (const HandshakeExtension& extension : message.unknown_extensions) {
    if (ExtensionName(extension.type) != nullptr) {
      return Invalid(type, absl::StrCat("extension type ", extension.type,
                                        " is a known one: set its field"));
    }
    if (static_cast<int>(extension.type) <= previous) {
      return Invalid(type, "unknown_extensions must ascend by type");
    }
    if (extension.value.size() > 0xFFFF) {
      return Invalid(type, absl::StrCat("extension type ", extension.type,
                                        " is longer than 65535 bytes"));
    }
    previous = extension.type;
  }
  return absl::OkStatus();
}

// Every extension of `message` in ascending type order.
void WriteExtensions(const HandshakeMessage& message, Writer& writer) {
  auto unknown = message.unknown_extensions.begin();
  auto write_unknown_below = [&](uint32_t limit) {
    for (; unknown != message.unknown_extensions.end() && unknown->type < limit;
         ++unknown) {
      writer.U16(unknown->type);
      writer.U16(static_cast<uint16_t>(unknown->value.size()));
      writer.Bytes(unknown->value);
    }
  };
  write_unknown_below(
      static_cast<uint16_t>(HandshakeExtensionType::kReadDepth));
  if (message.read_depth.has_value()) {
    writer.U16(static_cast<uint16_t>(HandshakeExtensionType::kReadDepth));
    writer.U16(kKnownExtensionSize);
    writer.U8(message.read_depth->initiator);
    writer.U8(message.read_depth->responder);
    writer.U16(0);
  }
  write_unknown_below(static_cast<uint16_t>(HandshakeExtensionType::kTraffic));
  if (message.traffic.has_value()) {
    const TrafficSettings& traffic = *message.traffic;
    writer.U16(static_cast<uint16_t>(HandshakeExtensionType::kTraffic));
    writer.U16(kKnownExtensionSize);
    writer.U8((traffic.traffic_class.has_value() ? 1 : 0) |
              (traffic.service_level.has_value() ? 2 : 0));
    writer.U8(traffic.traffic_class.value_or(0));
    writer.U8(traffic.service_level.value_or(0));
    writer.U8(0);
  }
  write_unknown_below(
      static_cast<uint16_t>(HandshakeExtensionType::kRetryAfter));
  if (message.retry_after_ms.has_value()) {
    writer.U16(static_cast<uint16_t>(HandshakeExtensionType::kRetryAfter));
    writer.U16(kKnownExtensionSize);
    writer.U32(*message.retry_after_ms);
  }
  write_unknown_below(0x10000);
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
  if (version != kLegacyHandshakeVersion && version != kHandshakeVersion) {
    return Invalid(
        type, absl::StrCat("frame format ", version, " is not ",
                           kLegacyHandshakeVersion, " or ", kHandshakeVersion));
  }
  if (!IsKnownType(version, static_cast<uint8_t>(type))) {
    return UnknownType(version, static_cast<unsigned>(type));
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
