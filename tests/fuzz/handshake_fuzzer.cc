// libFuzzer target for the handshake wire format (transport/handshake.h).
//
// Whatever the bytes: decoding never crashes, never reads out of the input
// and fails only with kInvalidArgument; the frame decoder and the
// header-then-body path a stream reader takes agree; and whatever decodes
// re-encodes to the very same bytes (decoding is strict, so it accepts
// nothing this side would not emit) and decodes again to the same message.
//
// Built and run with clang by tests/fuzz/run_fuzzers.sh; the seed corpus
// (tests/fuzz/corpus/handshake/) also runs under plain `bazel test`.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "transport/handshake.h"

namespace rdma_transport {
namespace {

[[noreturn]] void Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "handshake_fuzzer: %s: %s\n", what,
               status.ToString().c_str());
  std::abort();
}

bool SameExtensions(const HandshakeMessage& a, const HandshakeMessage& b) {
  if (a.read_depth.has_value() != b.read_depth.has_value() ||
      (a.read_depth.has_value() &&
       (a.read_depth->initiator != b.read_depth->initiator ||
        a.read_depth->responder != b.read_depth->responder))) {
    return false;
  }
  if (a.traffic.has_value() != b.traffic.has_value() ||
      (a.traffic.has_value() &&
       (a.traffic->traffic_class != b.traffic->traffic_class ||
        a.traffic->service_level != b.traffic->service_level))) {
    return false;
  }
  if (a.retry_after_ms != b.retry_after_ms) return false;
  if (a.unknown_extensions.size() != b.unknown_extensions.size()) return false;
  for (size_t i = 0; i < a.unknown_extensions.size(); ++i) {
    if (a.unknown_extensions[i].type != b.unknown_extensions[i].type ||
        a.unknown_extensions[i].value != b.unknown_extensions[i].value) {
      return false;
    }
  }
  return true;
}

bool SameMessage(const HandshakeMessage& a, const HandshakeMessage& b) {
  return a.type == b.type && a.version == b.version &&
         a.min_version == b.min_version && a.max_version == b.max_version &&
         a.endpoint.qp_num == b.endpoint.qp_num &&
         a.endpoint.psn == b.endpoint.psn &&
         std::memcmp(a.endpoint.gid.raw, b.endpoint.gid.raw,
                     sizeof(a.endpoint.gid.raw)) == 0 &&
         a.endpoint.lid == b.endpoint.lid &&
         a.endpoint.port == b.endpoint.port &&
         a.endpoint.mtu == b.endpoint.mtu && a.recv_slots == b.recv_slots &&
         a.slot_size == b.slot_size && a.probe_address == b.probe_address &&
         a.probe_rkey == b.probe_rkey && a.token == b.token &&
         a.reason == b.reason && SameExtensions(a, b);
}

void CheckOneInput(std::span<const uint8_t> bytes) {
  absl::StatusOr<HandshakeMessage> message = DecodeHandshakeFrame(bytes);

  // The stream reader's path: the header alone, then exactly its body.
  if (bytes.size() >= kHandshakeHeaderSize) {
    absl::StatusOr<HandshakeHeader> header =
        DecodeHandshakeHeader(bytes.first(kHandshakeHeaderSize));
    if (!header.ok() && message.ok()) {
      Fail("frame decodes but its header does not", header.status());
    }
    if (header.ok() &&
        bytes.size() == kHandshakeHeaderSize + header->body_length) {
      absl::StatusOr<HandshakeMessage> body =
          DecodeHandshakeBody(*header, bytes.subspan(kHandshakeHeaderSize));
      if (body.ok() != message.ok()) {
        Fail("header+body and frame decoding disagree",
             body.ok() ? message.status() : body.status());
      }
      if (body.ok() && !SameMessage(*body, *message)) {
        Fail("header+body and frame decoding give different messages",
             absl::OkStatus());
      }
    }
  }

  if (!message.ok()) {
    if (message.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail("decoding failed with a code other than INVALID_ARGUMENT",
           message.status());
    }
    return;
  }
  absl::StatusOr<std::vector<uint8_t>> encoded = EncodeHandshake(*message);
  if (!encoded.ok())
    Fail("a decoded message does not encode", encoded.status());
  if (encoded->size() != bytes.size() ||
      std::memcmp(encoded->data(), bytes.data(), bytes.size()) != 0) {
    Fail("re-encoding a decoded frame gives different bytes", absl::OkStatus());
  }
  absl::StatusOr<HandshakeMessage> again = DecodeHandshakeFrame(*encoded);
  if (!again.ok()) Fail("an encoded message does not decode", again.status());
  if (!SameMessage(*again, *message)) {
    Fail("the round trip changed the message", absl::OkStatus());
  }
}

}  // namespace
}  // namespace rdma_transport

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rdma_transport::CheckOneInput(std::span<const uint8_t>(data, size));
  return 0;
}
