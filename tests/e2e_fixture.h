// File: tests/e2e_fixture.h
//
// The end-to-end suite's fixture: a backend (test_backend.h), a client and a
// server Context on its two devices, and helpers to connect pairs and to make
// and check message payloads. Not thread-safe; helpers that wait take
// deadlines, so a broken transport fails a test instead of hanging it.

#ifndef RDMA_TRANSPORT_TESTS_E2E_FIXTURE_H_
#define RDMA_TRANSPORT_TESTS_E2E_FIXTURE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "tests/test_backend.h"
#include "transport/config.h"
#include "transport/connection.h"
#include "transport/context.h"
#include "transport/listener.h"

namespace rdma_transport {

#define E2E_ASSERT_OK(expr)                                        \
  do {                                                             \
    const absl::Status e2e_status_ = (expr);                       \
    ASSERT_TRUE(e2e_status_.ok()) << #expr << ": " << e2e_status_; \
  } while (0)

struct ConnectionPair {
  std::unique_ptr<Connection> client;
  std::unique_ptr<Connection> server;
};

class EndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Opens the two contexts with `options` layered over the environment.
  void OpenContexts(const TransportOptions& options = {});
  // Each side with its own options (an MTU or traffic class apart).
  void OpenContexts(const TransportOptions& client,
                    const TransportOptions& server);

  // A listener on the server context, a Connect() from the client, and the
  // accepted connection.
  absl::StatusOr<ConnectionPair> ConnectPair(
      const ConnectionOptions& options = {});
  // The same with each side's options and the listener's.
  absl::StatusOr<ConnectionPair> ConnectPair(
      const ConnectionOptions& client_options,
      const ConnectionOptions& server_options,
      const ListenerOptions& listener_options);

  TestBackend& backend() { return *backend_; }
  // The backend's clock: virtual on the simulator. Every deadline of the
  // suite comes from it.
  Env& env() { return backend_->verbs().env(); }
  Deadline In(Clock::duration timeout) { return env().DeadlineIn(timeout); }
  Context& client_context() { return *client_context_; }
  Context& server_context() { return *server_context_; }

  std::unique_ptr<TestBackend> backend_;
  std::unique_ptr<Context> client_context_;
  std::unique_ptr<Context> server_context_;
};

// Deterministic message contents: the length and bytes of message `seq` of
// stream `stream`, so a receiver can check each one without side channels.
size_t MessageLength(uint64_t stream, uint64_t seq, size_t max_length);
void FillMessage(uint64_t stream, uint64_t seq, std::span<std::byte> out);
// Empty when `message` is what FillMessage makes, else what differs.
std::string CheckMessage(uint64_t stream, uint64_t seq,
                         std::span<const std::byte> message);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_E2E_FIXTURE_H_
