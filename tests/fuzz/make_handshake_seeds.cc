// Writes, or checks, the handshake fuzzer's seed corpus
// (tests/fuzz/corpus/handshake/): valid frames of every type, frames at the
// size limits, format-2 frames of protocol-2 peers, extensions known,
// unknown and critical, and what a confused peer sends (HTTP, TLS, a newer
// format, a byte-swapped magic, a cut-off frame, two frames at once).
//
//   bazel run //tests/fuzz:make_handshake_seeds --
//   "$PWD/tests/fuzz/corpus/handshake" make_handshake_seeds --check DIR   #
//   fails if a seed in DIR is missing or stale
//
// The seeds are made with EncodeHandshake, so after a deliberate format
// change rerun the first command; the --check run (a `bazel test` target)
// says when that is due.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "transport/handshake.h"

namespace rdma_transport {
namespace {

namespace fs = std::filesystem;

using Bytes = std::vector<uint8_t>;

Bytes Encode(const HandshakeMessage& message) {
  absl::StatusOr<Bytes> bytes = EncodeHandshake(message);
  if (!bytes.ok()) {
    std::fprintf(stderr, "EncodeHandshake: %s\n",
                 bytes.status().ToString().c_str());
    std::exit(1);
  }
  return *bytes;
}

HandshakeMessage Hello() {
  HandshakeMessage hello;
  hello.type = HandshakeType::kHello;
  hello.endpoint.qp_num = 0x000123;
  hello.endpoint.psn = 0x4a5b6c;
  hello.endpoint.gid.raw[10] = 0xff;
  hello.endpoint.gid.raw[11] = 0xff;
  hello.endpoint.gid.raw[12] = 192;
  hello.endpoint.gid.raw[13] = 168;
  hello.endpoint.gid.raw[14] = 1;
  hello.endpoint.gid.raw[15] = 7;
  hello.endpoint.lid = 0;
  hello.endpoint.port = 1;
  hello.endpoint.mtu = 1024;
  hello.recv_slots = 64;
  hello.slot_size = 8192;
  hello.token = "secret-token";
  return hello;
}

HandshakeMessage Legacy(HandshakeMessage message) {
  message.version = kLegacyHandshakeVersion;
  message.read_depth.reset();
  message.traffic.reset();
  message.retry_after_ms.reset();
  message.unknown_extensions.clear();
  return message;
}

std::vector<std::pair<std::string, Bytes>> Seeds() {
  std::vector<std::pair<std::string, Bytes>> seeds;
  HandshakeMessage hello = Hello();
  hello.read_depth = ReadDepth{16, 16};
  hello.traffic = TrafficSettings{106, 3};
  hello.unknown_extensions.push_back({0x0040, {1, 2, 3, 4, 5}});
  seeds.emplace_back("hello", Encode(hello));

  HandshakeMessage no_token = Hello();
  no_token.token.clear();
  no_token.endpoint.mtu = 4096;
  seeds.emplace_back("hello_no_token", Encode(no_token));

  HandshakeMessage max_token = Hello();
  max_token.token.resize(kMaxTokenLength);
  for (size_t i = 0; i < kMaxTokenLength; ++i) {
    max_token.token[i] = static_cast<char>(i);
  }
  seeds.emplace_back("hello_max_token", Encode(max_token));

  HandshakeMessage critical = Hello();
  critical.unknown_extensions.push_back({0x8001, {0}});
  seeds.emplace_back("hello_critical_extension", Encode(critical));

  HandshakeMessage accept = Hello();
  accept.type = HandshakeType::kAccept;
  accept.token.clear();
  accept.endpoint.qp_num = 0xFFFFFF;
  accept.endpoint.mtu = 256;
  accept.endpoint.port = 2;
  accept.recv_slots = kMaxRecvSlots;
  accept.slot_size = kMaxSlotSize;
  accept.min_version = kHandshakeVersion;
  accept.max_version = kHandshakeVersion;
  accept.read_depth = ReadDepth{8, 4};
  accept.traffic = TrafficSettings{std::nullopt, 5};
  seeds.emplace_back("accept", Encode(accept));

  HandshakeMessage ready;
  ready.type = HandshakeType::kReady;
  const Bytes ready_bytes = Encode(ready);
  seeds.emplace_back("ready", ready_bytes);

  HandshakeMessage established;
  established.type = HandshakeType::kEstablished;
  established.probe_address = 0x00007f0012345000;
  established.probe_rkey = 0x1234;
  seeds.emplace_back("established", Encode(established));

  HandshakeMessage reject;
  reject.type = HandshakeType::kReject;
  reject.reason = "server busy: all 64 handshake slots are making progress";
  reject.retry_after_ms = 10;
  seeds.emplace_back("reject", Encode(reject));
  reject.reason.assign(kMaxReasonLength, '~');
  seeds.emplace_back("reject_max_reason", Encode(reject));

  // What protocol-2 peers send: frame format 2, no extensions.
  seeds.emplace_back("legacy_hello", Encode(Legacy(Hello())));
  seeds.emplace_back("legacy_accept", Encode(Legacy(accept)));
  seeds.emplace_back("legacy_ready", Encode(Legacy(ready)));
  reject.reason = "version mismatch: peer speaks 2";
  seeds.emplace_back("legacy_reject", Encode(Legacy(reject)));

  const std::string http = "GET / HTTP/1.1\r\nHost: rdma\r\n\r\n";
  seeds.emplace_back("http_get", Bytes(http.begin(), http.end()));

  // The start of a TLS 1.2 ClientHello record.
  seeds.emplace_back("tls_client_hello",
                     Bytes{0x16, 0x03, 0x01, 0x00, 0x2f, 0x01, 0x00, 0x00, 0x2b,
                           0x03, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00});

  Bytes format4 = ready_bytes;
  format4[5] = 4;
  seeds.emplace_back("ready_format4", format4);

  Bytes swapped = ready_bytes;
  std::swap(swapped[0], swapped[3]);
  std::swap(swapped[1], swapped[2]);
  seeds.emplace_back("ready_swapped_magic", swapped);

  Bytes truncated = Encode(Hello());
  truncated.resize(30);
  seeds.emplace_back("hello_truncated", truncated);

  Bytes two_frames = Encode(Hello());
  two_frames.insert(two_frames.end(), ready_bytes.begin(), ready_bytes.end());
  seeds.emplace_back("hello_then_ready", two_frames);
  return seeds;
}

fs::path Resolve(const std::string& argument) {
  fs::path path(argument);
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (!fs::exists(path) && srcdir != nullptr && workspace != nullptr) {
    return fs::path(srcdir) / workspace / argument;
  }
  return path;
}

int Write(const fs::path& directory) {
  fs::create_directories(directory);
  for (const auto& [name, bytes] : Seeds()) {
    std::ofstream file(directory / name, std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    if (!file) {
      std::fprintf(stderr, "cannot write %s\n", (directory / name).c_str());
      return 1;
    }
    std::printf("%s: %zu bytes\n", (directory / name).c_str(), bytes.size());
  }
  return 0;
}

int Check(const fs::path& directory) {
  int stale = 0;
  for (const auto& [name, bytes] : Seeds()) {
    std::ifstream file(directory / name, std::ios::binary);
    const Bytes on_disk((std::istreambuf_iterator<char>(file)),
                        std::istreambuf_iterator<char>());
    if (!file.is_open() || on_disk != bytes) {
      std::fprintf(stderr, "seed %s is %s; rerun make_handshake_seeds\n",
                   (directory / name).c_str(),
                   file.is_open() ? "stale" : "missing");
      ++stale;
    }
  }
  if (stale == 0) std::printf("%zu seeds are current\n", Seeds().size());
  return stale == 0 ? 0 : 1;
}

}  // namespace
}  // namespace rdma_transport

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--check") {
    // A seed file names its directory (what `bazel test` passes).
    std::filesystem::path path = rdma_transport::Resolve(argv[2]);
    if (std::filesystem::is_regular_file(path)) path = path.parent_path();
    return rdma_transport::Check(path);
  }
  if (argc == 2) return rdma_transport::Write(argv[1]);
  std::fprintf(stderr, "usage: %s [--check] CORPUS_DIR\n", argv[0]);
  return 2;
}
