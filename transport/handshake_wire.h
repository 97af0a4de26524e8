// File: transport/handshake_wire.h
//
// The primitives both handshake codecs (handshake.cc, the frames;
// handshake_extensions.cc, the extensions) read and write with: a
// bounds-checked big-endian Reader and Writer, and the kInvalidArgument
// errors they return, each naming the frame type. Internal to
// //transport:handshake; the wire format is described in handshake.h.

#ifndef RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_WIRE_H_
#define RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/handshake.h"

namespace rdma_transport {
namespace handshake_internal {

inline absl::Status Invalid(HandshakeType type, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("handshake ", HandshakeTypeName(type), ": ", what));
}

inline absl::Status OutOfRange(HandshakeType type, const char* field,
                               int64_t value, int64_t min, int64_t max) {
  return Invalid(
      type, absl::StrCat(field, " ", value, " out of range ", min, "..", max));
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

inline absl::Status CheckReserved(HandshakeType type, const char* field,
                                  uint32_t value) {
  if (value == 0) return absl::OkStatus();
  return Invalid(type, absl::StrCat(field, " is ", value, ", must be 0"));
}

inline std::span<const uint8_t> AsBytes(const std::string& text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

}  // namespace handshake_internal
}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_WIRE_H_
