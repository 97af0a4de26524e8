#include "tests/e2e_fixture.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sim/fabric.h"
#include "tests/connection_pair.h"

namespace rdma_transport {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

void EndToEndTest::SetUp() {
  absl::StatusOr<std::unique_ptr<TestBackend>> backend = MakeTestBackend();
  ASSERT_TRUE(backend.ok()) << backend.status();
  backend_ = *std::move(backend);
}

void EndToEndTest::OpenContexts(const TransportOptions& options) {
  OpenContexts(options, options);
}

void EndToEndTest::OpenContexts(const TransportOptions& client_options,
                                const TransportOptions& server_options) {
  absl::StatusOr<TransportConfig> client_config =
      LoadTransportConfig(client_options);
  ASSERT_TRUE(client_config.ok()) << client_config.status();
  absl::StatusOr<TransportConfig> server_config =
      LoadTransportConfig(server_options);
  ASSERT_TRUE(server_config.ok()) << server_config.status();
  absl::StatusOr<std::unique_ptr<Context>> client = Context::Open(
      backend_->verbs(), backend_->client_device(), *client_config);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<std::unique_ptr<Context>> server = Context::Open(
      backend_->verbs(), backend_->server_device(), *server_config);
  ASSERT_TRUE(server.ok()) << server.status();
  client_context_ = *std::move(client);
  server_context_ = *std::move(server);
}

void EndToEndTest::TearDown() {
  client_context_.reset();
  server_context_.reset();
  if (backend_ != nullptr && backend_->fabric() != nullptr) {
    EXPECT_EQ(LeakReportText(*backend_->fabric()), "")
        << "verbs objects leaked";
  }
}

absl::StatusOr<ConnectionPair> EndToEndTest::ConnectPair(
    const ConnectionOptions& options) {
  if (client_context_ == nullptr) {
    OpenContexts();
    if (client_context_ == nullptr) {
      return absl::InternalError("contexts could not be opened");
    }
  }
  DialResult dial =
      Dial(*client_context_, *server_context_, options, ListenAddress());
  if (!dial.client.ok()) return dial.client.status();
  if (!dial.server.ok()) return dial.server.status();
  return ConnectionPair{*std::move(dial.client), *std::move(dial.server)};
}

absl::StatusOr<ConnectionPair> EndToEndTest::ConnectPair(
    const ConnectionOptions& client_options,
    const ConnectionOptions& server_options,
    const ListenerOptions& listener_options) {
  if (client_context_ == nullptr) {
    OpenContexts();
    if (client_context_ == nullptr) {
      return absl::InternalError("contexts could not be opened");
    }
  }
  DialResult dial = DialWith(*client_context_, *server_context_, client_options,
                             server_options, listener_options, ListenAddress());
  if (!dial.client.ok()) return dial.client.status();
  if (!dial.server.ok()) return dial.server.status();
  return ConnectionPair{*std::move(dial.client), *std::move(dial.server)};
}

size_t MessageLength(uint64_t stream, uint64_t seq, size_t max_length) {
  return Mix(stream * 1000003 + seq) % (max_length + 1);
}

void FillMessage(uint64_t stream, uint64_t seq, std::span<std::byte> out) {
  uint64_t state = Mix(stream ^ (seq << 20));
  std::byte* data = out.data();
  const size_t size = out.size();
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    state = Mix(state);
    std::memcpy(data + i, &state, 8);
  }
  if (i < size) {
    state = Mix(state);
    std::memcpy(data + i, &state, size - i);
  }
}

std::string CheckMessage(uint64_t stream, uint64_t seq,
                         std::span<const std::byte> message) {
  uint64_t state = Mix(stream ^ (seq << 20));
  const std::byte* data = message.data();
  const size_t size = message.size();
  for (size_t i = 0; i < size; i += 8) {
    state = Mix(state);
    const size_t n = std::min<size_t>(8, size - i);
    uint64_t word = state;
    if (n == 8) std::memcpy(&word, data + i, 8);  // one load, no call
    if (n == 8 ? word != state : std::memcmp(data + i, &state, n) != 0) {
      return absl::StrCat("stream ", stream, " message ", seq, " (", size,
                          " bytes) differs in bytes ", i, "..", i + n - 1);
    }
  }
  return "";
}

}  // namespace rdma_transport
