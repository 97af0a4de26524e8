// File: transport/handshake_extensions.cc
//
// Decoding, checking and writing the extensions of format-3 handshake
// frames (handshake_extensions.h).

#include "transport/handshake_extensions.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rdma_transport {
namespace handshake_internal {
namespace {

const char* ExtensionName(uint16_t type) {
  switch (static_cast<HandshakeExtensionType>(type)) {
    case HandshakeExtensionType::kReadDepth:
      return "READ_DEPTH";
    case HandshakeExtensionType::kTraffic:
      return "TRAFFIC";
    case HandshakeExtensionType::kRetryAfter:
      return "RETRY_AFTER";
    case HandshakeExtensionType::kMessaging:
      return "MESSAGING";
  }
  return nullptr;
}

constexpr size_t kKnownExtensionSize = 4;

// Whether a known extension may appear in a `type` frame.
bool BelongsTo(HandshakeExtensionType extension, HandshakeType type) {
  switch (extension) {
    case HandshakeExtensionType::kReadDepth:
    case HandshakeExtensionType::kTraffic:
    case HandshakeExtensionType::kMessaging:
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

absl::Status CheckMessaging(HandshakeType, const MessagingFeatures&) {
  return absl::OkStatus();  // a bool cannot be out of range
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
    case HandshakeExtensionType::kMessaging: {
      const uint8_t flags = reader.U8();
      const uint8_t reserved8 = reader.U8();
      const uint16_t reserved16 = reader.U16();
      if ((flags & ~1u) != 0) {
        return Invalid(type, absl::StrFormat("MESSAGING flags 0x%02x: only "
                                             "bit 0 (rendezvous) is defined",
                                             flags));
      }
      if (reserved8 != 0 || reserved16 != 0) {
        return Invalid(type, "MESSAGING reserved bytes are not 0");
      }
      message.messaging = MessagingFeatures{(flags & 1) != 0};
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

}  // namespace

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

bool HasExtensions(const HandshakeMessage& message) {
  return message.read_depth.has_value() || message.traffic.has_value() ||
         message.retry_after_ms.has_value() || message.messaging.has_value() ||
         !message.unknown_extensions.empty();
}

// One known extension of `message`, if present: it belongs in a frame of
// `type` and `check` accepts its value.
template <typename Value, typename Check>
absl::Status CheckKnownExtension(HandshakeType type,
                                 HandshakeExtensionType extension,
                                 const std::optional<Value>& value,
                                 Check check) {
  if (!value.has_value()) return absl::OkStatus();
  if (!BelongsTo(extension, type)) {
    return Invalid(type,
                   absl::StrCat("extension ",
                                ExtensionName(static_cast<uint16_t>(extension)),
                                " does not belong in this frame"));
  }
  return check(type, *value);
}

absl::Status CheckExtensions(const HandshakeMessage& message) {
  const HandshakeType type = message.type;
  for (const absl::Status& status :
       {CheckKnownExtension(type, HandshakeExtensionType::kReadDepth,
                            message.read_depth, CheckReadDepth),
        CheckKnownExtension(type, HandshakeExtensionType::kTraffic,
                            message.traffic, CheckTraffic),
        CheckKnownExtension(type, HandshakeExtensionType::kRetryAfter,
                            message.retry_after_ms, CheckRetryAfter),
        CheckKnownExtension(type, HandshakeExtensionType::kMessaging,
                            message.messaging, CheckMessaging)}) {
    if (!status.ok()) return status;
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
  write_unknown_below(
      static_cast<uint16_t>(HandshakeExtensionType::kMessaging));
  if (message.messaging.has_value()) {
    writer.U16(static_cast<uint16_t>(HandshakeExtensionType::kMessaging));
    writer.U16(kKnownExtensionSize);
    writer.U8(message.messaging->rendezvous ? 1 : 0);
    writer.U8(0);
    writer.U16(0);
  }
  write_unknown_below(0x10000);
}

}  // namespace handshake_internal
}  // namespace rdma_transport
