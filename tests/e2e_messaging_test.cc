// The end-to-end suite's zero-copy and rendezvous messaging (connection.h,
// "Zero copy" and "Rendezvous"): written once against the transport API and
// run on every backend, like e2e_test.cc.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "tests/connection_test_peer.h"
#include "tests/e2e_fixture.h"
#include "transport/immediate_data.h"
#include "transport/rendezvous_request.h"
#include "verbs_shim/env_thread.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr size_t k1MiB = size_t{1} << 20;
constexpr size_t k64MiB = size_t{64} << 20;

// Registered memory of `size` bytes with `access`.
struct Region {
  std::vector<std::byte> memory;
  MemoryRegion registered;
};

absl::StatusOr<Region> MakeRegion(Context& context, size_t size, int access) {
  Region region;
  region.memory.resize(size);
  absl::StatusOr<MemoryRegion> registered =
      context.RegisterMemory(region.memory, access);
  if (!registered.ok()) return registered.status();
  region.registered = *std::move(registered);
  return region;
}

// Memory registrations alive on the simulated `device` (the leak report).
size_t LiveRegistrations(sim::Fabric& fabric, const std::string& device) {
  const std::vector<sim::LiveObject> live = fabric.LeakReport();
  return std::count_if(live.begin(), live.end(), [&](const sim::LiveObject& o) {
    return o.kind == "mr" && o.device == device;
  });
}

// The sizes every path must carry, mixed: zero, one byte, the inline limit,
// a whole slot, one byte more than a slot (the smallest rendezvous message),
// 1 MiB and 64 MiB, then again in another order.
std::vector<size_t> MixedSizes(const Connection& sender) {
  const size_t inline_limit = sender.usable_inline();
  const size_t slot = sender.max_message_size();
  return {0,
          1,
          inline_limit,
          slot,
          slot + 1,
          k1MiB,
          k64MiB,
          1,
          slot,
          k1MiB,
          0,
          slot + 1,
          inline_limit,
          k1MiB,
          slot,
          1,
          k64MiB,
          inline_limit,
          slot + 1};
}

// Sends message i of MixedSizes() as stream 21, every other one from a
// registered region (zero copy) and the rest by Send() from a vector.
absl::Status SendMixed(Connection& sender, Context& context) {
  const std::vector<size_t> sizes = MixedSizes(sender);
  absl::StatusOr<Region> source = MakeRegion(context, k64MiB, kRemoteRead);
  if (!source.ok()) return source.status();
  std::vector<std::byte> copy(k64MiB);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const size_t size = sizes[i];
    const Deadline deadline = sender.env().DeadlineIn(seconds(60));
    absl::Status sent;
    if (i % 2 == 0) {
      FillMessage(21, i, {source->memory.data(), size});
      sent = sender.SendFrom(source->registered, 0, size, deadline);
    } else {
      FillMessage(21, i, {copy.data(), size});
      sent = sender.Send({copy.data(), size}, deadline);
    }
    if (!sent.ok()) {
      return WithContext(sent, absl::StrCat("message ", i, " (", size, " B)"));
    }
  }
  return absl::OkStatus();
}

class EveryReceivePathTest : public EndToEndTest {
 protected:
  // MixedSizes() from a sending thread, received by every path in turn on
  // this one; each connection is used by one thread only, so either thread
  // mode serves.
  void EveryMessageSizeArrivesInOrder(ThreadMode thread_mode);
};

TEST_F(EveryReceivePathTest, EveryMessageSizeArrivesInOrderByEveryReceivePath) {
  EveryMessageSizeArrivesInOrder(ThreadMode::kShared);
}

// The same with no atomic lock on either side (connection_lock.h): the
// accepted connection is made on the listener's thread and used on this one,
// handed over by the accept's own synchronisation.
TEST_F(EveryReceivePathTest, SerializedConnectionsCarryEveryMessageSize) {
  EveryMessageSizeArrivesInOrder(ThreadMode::kSerialized);
}

void EveryReceivePathTest::EveryMessageSizeArrivesInOrder(
    ThreadMode thread_mode) {
  ConnectionOptions options;
  options.recv_slots = 16;
  options.thread_mode = thread_mode;
  absl::StatusOr<ConnectionPair> pair = ConnectPair(options);
  ASSERT_TRUE(pair.ok()) << pair.status();
  ASSERT_TRUE(pair->client->path().rendezvous);
  ASSERT_TRUE(pair->server->path().rendezvous);
  Connection& server = *pair->server;
  const std::vector<size_t> sizes = MixedSizes(*pair->client);
  auto sending = RunInThread(
      env(), [&] { return SendMixed(*pair->client, client_context()); });

  absl::StatusOr<Region> sink =
      MakeRegion(server_context(), k64MiB, kLocalWrite);
  ASSERT_TRUE(sink.ok()) << sink.status();
  std::vector<std::byte> buffer(k64MiB);
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("message ", i, " of ", sizes[i], " bytes"));
    absl::StatusOr<size_t> next = server.NextMessageSize(In(seconds(60)));
    ASSERT_TRUE(next.ok()) << next.status();
    ASSERT_EQ(*next, sizes[i]);
    std::span<const std::byte> received;
    ReceivedMessage view;
    if (sizes[i] <= server.max_message_size() && i % 3 == 0) {
      // In place: the slot itself.
      absl::StatusOr<ReceivedMessage> borrowed =
          server.ReceiveBorrowed(In(seconds(60)));
      ASSERT_TRUE(borrowed.ok()) << borrowed.status();
      view = *std::move(borrowed);
      received = view.data();
      EXPECT_EQ(server.stats().views_held, 1u);
    } else if (i % 3 == 1) {
      // Into a registered region: a rendezvous message lands there.
      std::fill_n(sink->memory.begin(), sizes[i], std::byte{0});
      absl::StatusOr<size_t> n =
          server.ReceiveInto(sink->registered, 0, k64MiB, In(seconds(60)));
      ASSERT_TRUE(n.ok()) << n.status();
      received = {sink->memory.data(), *n};
    } else {
      std::fill_n(buffer.begin(), sizes[i], std::byte{0});
      absl::StatusOr<size_t> n = server.Receive(buffer, In(seconds(60)));
      ASSERT_TRUE(n.ok()) << n.status();
      received = {buffer.data(), *n};
    }
    ASSERT_EQ(received.size(), sizes[i]);
    ASSERT_EQ(CheckMessage(21, i, received), "");
  }
  E2E_ASSERT_OK(sending.Get());
  EXPECT_EQ(server.stats().views_held, 0u);
  const ConnectionStats sent = pair->client->stats();
  const ConnectionStats got = server.stats();
  const uint64_t large = std::count_if(
      sizes.begin(), sizes.end(),
      [&](size_t s) { return s > pair->client->max_message_size(); });
  EXPECT_EQ(sent.rendezvous_sent, large);
  EXPECT_EQ(got.rendezvous_received, large);
  EXPECT_EQ(got.messages_received, sizes.size());
  EXPECT_EQ(sent.bytes_sent, got.bytes_received);
  if (sim::Fabric* fabric = backend().fabric()) {
    EXPECT_EQ(fabric->Counters().rnr_naks, 0u);
  }
  E2E_ASSERT_OK(pair->client->Close(In(seconds(5))));
  E2E_ASSERT_OK(server.Close(In(seconds(5))));
}

TEST_F(EndToEndTest, HeldViewsHoldBackTheSenderAndReleasingThemLetsItOn) {
  ConnectionOptions options;
  options.recv_slots = 8;
  absl::StatusOr<ConnectionPair> pair = ConnectPair(options);
  ASSERT_TRUE(pair.ok()) << pair.status();
  std::vector<std::byte> message(100, std::byte{7});
  // Data keeps two credits in reserve: six messages fill what it may use.
  for (int i = 0; i < 6; ++i) E2E_ASSERT_OK(pair->client->Send(message));
  std::vector<ReceivedMessage> views;
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<ReceivedMessage> view =
        pair->server->ReceiveBorrowed(In(seconds(5)));
    ASSERT_TRUE(view.ok()) << view.status();
    views.push_back(*std::move(view));
  }
  EXPECT_EQ(pair->server->stats().views_held, 6u);
  EXPECT_EQ(pair->client->Send(message, In(seconds(1))).code(),
            absl::StatusCode::kDeadlineExceeded);
  for (ReceivedMessage& view : views) view.Release();
  EXPECT_FALSE(views.front().held());
  EXPECT_TRUE(views.front().data().empty());
  E2E_ASSERT_OK(pair->client->Send(message, In(seconds(5))));
  std::vector<std::byte> buffer(100);
  absl::StatusOr<size_t> n = pair->server->Receive(buffer, In(seconds(5)));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 100u);
}

TEST_F(EndToEndTest, AReusedViewGivesItsSlotBackWithTheNextReceive) {
  ConnectionOptions options;
  options.recv_slots = 8;
  absl::StatusOr<ConnectionPair> pair = ConnectPair(options);
  ASSERT_TRUE(pair.ok()) << pair.status();
  absl::StatusOr<ConnectionPair> other = ConnectPair(options);
  ASSERT_TRUE(other.ok()) << other.status();
  // A view of the other connection: released when handed to this one.
  std::vector<std::byte> message(100, std::byte{1});
  E2E_ASSERT_OK(other->client->Send(message));
  ReceivedMessage view;
  E2E_ASSERT_OK(other->server->ReceiveBorrowed(&view, In(seconds(5))));
  EXPECT_EQ(other->server->stats().views_held, 1u);
  // Five times the receive ring, one view at a time: without the slot going
  // back in each call the sender would run out of credit after six.
  for (int i = 0; i < 40; ++i) {
    std::fill(message.begin(), message.end(), std::byte(i));
    E2E_ASSERT_OK(pair->client->Send(message, In(seconds(5))));
    E2E_ASSERT_OK(pair->server->ReceiveBorrowed(&view, In(seconds(5))));
    ASSERT_TRUE(view.held());
    ASSERT_EQ(view.size(), message.size());
    ASSERT_TRUE(std::equal(message.begin(), message.end(), view.data().begin()))
        << "message " << i;
    ASSERT_EQ(pair->server->stats().views_held, 1u);
    if (i == 0) {
      EXPECT_EQ(other->server->stats().views_held, 0u);
    }
  }
  // An error releases the view all the same.
  E2E_ASSERT_OK(pair->client->Close(In(seconds(5))));
  EXPECT_EQ(pair->server->ReceiveBorrowed(&view, In(seconds(5))).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(view.held());
  EXPECT_EQ(pair->server->stats().views_held, 0u);
}

TEST_F(EndToEndTest, ARendezvousMessageIsNotLentAndAShortBufferKeepsItQueued) {
  absl::StatusOr<ConnectionPair> pair = ConnectPair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  const size_t size = pair->client->max_message_size() + 1;
  std::vector<std::byte> message(size);
  FillMessage(22, 0, message);
  auto sending = RunInThread(env(), [&] {
    return pair->client->Send(message,
                              pair->client->env().DeadlineIn(seconds(30)));
  });
  absl::StatusOr<ReceivedMessage> borrowed =
      pair->server->ReceiveBorrowed(In(seconds(30)));
  EXPECT_EQ(borrowed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(borrowed.status().message(), HasSubstr("came by rendezvous"));
  std::vector<std::byte> small(size - 1);
  absl::StatusOr<size_t> n = pair->server->Receive(small, In(seconds(5)));
  EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Region> read_only =
      MakeRegion(server_context(), size, kRemoteRead);
  ASSERT_TRUE(read_only.ok()) << read_only.status();
  n = pair->server->ReceiveInto(read_only->registered, 0, size, In(seconds(5)));
  EXPECT_EQ(n.status().code(), absl::StatusCode::kPermissionDenied);
  std::vector<std::byte> buffer(size);
  n = pair->server->Receive(buffer, In(seconds(30)));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(CheckMessage(22, 0, {buffer.data(), *n}), "");
  E2E_ASSERT_OK(sending.Get());

  // A region without remote read cannot be the source of one.
  absl::StatusOr<Region> local =
      MakeRegion(client_context(), size, kLocalWrite);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(pair->client->SendFrom(local->registered, 0, size).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pair->client->SendFrom(local->registered, 1, size).code(),
            absl::StatusCode::kOutOfRange);
  E2E_ASSERT_OK(pair->client->status());
}

TEST_F(EndToEndTest, WithoutRendezvousALargerMessageIsRefusedAndNothingIsLost) {
  ConnectionOptions options;
  options.max_message_size = 1024;
  ConnectionOptions no_rendezvous = options;
  no_rendezvous.rendezvous = false;
  absl::StatusOr<ConnectionPair> pair =
      ConnectPair(no_rendezvous, options, TestListenerOptions());
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_FALSE(pair->client->path().rendezvous);
  EXPECT_FALSE(pair->server->path().rendezvous);
  std::vector<std::byte> big(1025);
  absl::Status status = pair->server->Send(big);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("the peer did not offer it"));
  status = pair->client->Send(big);
  EXPECT_THAT(status.message(), HasSubstr("ConnectionOptions::rendezvous"));
  E2E_ASSERT_OK(pair->client->status());
  E2E_ASSERT_OK(pair->client->Send(std::as_bytes(std::span("after", 5))));
  std::vector<std::byte> buffer(1024);
  absl::StatusOr<size_t> n = pair->server->Receive(buffer, In(seconds(5)));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 5u);
}

TEST_F(EndToEndTest, AReceiverDyingMidRendezvousEndsTheSenderUnavailable) {
  absl::StatusOr<ConnectionPair> pair = ConnectPair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  sim::Fabric* fabric = backend().fabric();
  const std::string device = client_context().device_name();
  const size_t registrations =
      fabric != nullptr ? LiveRegistrations(*fabric, device) : 0;
  std::vector<std::byte> message(k1MiB);
  auto sending = RunInThread(env(), [&] {
    return pair->client->Send(message,
                              pair->client->env().DeadlineIn(seconds(60)));
  });
  // The request is here; the receiver dies before reading it.
  absl::StatusOr<size_t> next = pair->server->NextMessageSize(In(seconds(30)));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, k1MiB);
  E2E_ASSERT_OK(backend().KillPeer(*pair->server));
  const absl::Status sent = sending.Get();
  EXPECT_EQ(sent.code(), absl::StatusCode::kUnavailable) << sent;
  EXPECT_EQ(pair->client->status().code(), absl::StatusCode::kUnavailable);
  if (fabric != nullptr) {
    EXPECT_EQ(LiveRegistrations(*fabric, device), registrations)
        << "the message's registration outlived the failed send";
  }
}

TEST_F(EndToEndTest, ASenderDyingMidRendezvousEndsTheReceiverUnavailable) {
  absl::StatusOr<ConnectionPair> pair = ConnectPair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  sim::Fabric* fabric = backend().fabric();
  const std::string device = server_context().device_name();
  const size_t registrations =
      fabric != nullptr ? LiveRegistrations(*fabric, device) : 0;
  std::vector<std::byte> message(k64MiB);
  auto sending = RunInThread(env(), [&] {
    return pair->client->Send(message,
                              pair->client->env().DeadlineIn(seconds(60)));
  });
  absl::StatusOr<size_t> next = pair->server->NextMessageSize(In(seconds(30)));
  ASSERT_TRUE(next.ok()) << next.status();
  E2E_ASSERT_OK(backend().KillPeer(*pair->client));
  std::vector<std::byte> buffer(k64MiB);
  absl::StatusOr<size_t> n = pair->server->Receive(buffer, In(seconds(60)));
  EXPECT_EQ(n.status().code(), absl::StatusCode::kUnavailable) << n.status();
  EXPECT_EQ(pair->server->status().code(), absl::StatusCode::kUnavailable);
  // The dead side's own wait ends too, whatever it says.
  EXPECT_FALSE(sending.Get().ok());
  if (fabric != nullptr) {
    EXPECT_EQ(LiveRegistrations(*fabric, device), registrations)
        << "the receive buffer's registration outlived the failed read";
  }
}

// What a broken or hostile peer could send instead of a rendezvous request,
// and what the receiver must say: each fails the connection naming it, and
// nothing is read from the peer's memory.
TEST_F(EndToEndTest, MalformedRendezvousTrafficIsAProtocolError) {
  struct Case {
    const char* what;
    bool rendezvous;  // both sides offer it
    uint32_t imm;
    std::vector<std::byte> payload;
    const char* says;
  };
  std::vector<std::byte> request(kRendezvousRequestBytes);
  RemoteRegion{4096, 1 << 20, 7}.Encode(
      std::span<std::byte, kRendezvousRequestBytes>(request));
  std::vector<std::byte> wraps(kRendezvousRequestBytes);
  RemoteRegion{~uint64_t{0} - 100, 1 << 20, 7}.Encode(
      std::span<std::byte, kRendezvousRequestBytes>(wraps));
  const std::vector<Case> cases = {
      {"a short request", true, EncodeImm(ImmKind::kRendezvous, 0),
       std::vector<std::byte>(kRendezvousRequestBytes - 1),
       "rendezvous request of 19 bytes"},
      {"a range that wraps", true, EncodeImm(ImmKind::kRendezvous, 0), wraps,
       "wraps around"},
      {"a report of nothing requested",
       true,
       EncodeImm(ImmKind::kCredit, 0, 1),
       {},
       "1 rendezvous messages finished"},
      {"reserved immediate bits",
       true,
       EncodeImm(ImmKind::kData, 0) | 1u << 24,
       {},
       "reserved bits"},
      {"a request nobody offered to take", false,
       EncodeImm(ImmKind::kRendezvous, 0), request, "did not settle"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ConnectionOptions options;
    options.rendezvous = c.rendezvous;
    absl::StatusOr<ConnectionPair> pair = ConnectPair(options);
    ASSERT_TRUE(pair.ok()) << pair.status();
    E2E_ASSERT_OK(
        ConnectionTestPeer::PostRawMessage(*pair->client, c.imm, c.payload));
    std::vector<std::byte> buffer(k1MiB);
    absl::StatusOr<size_t> n = pair->server->Receive(buffer, In(seconds(10)));
    EXPECT_EQ(n.status().code(), absl::StatusCode::kInternal) << n.status();
    EXPECT_THAT(n.status().message(), HasSubstr("protocol error"));
    EXPECT_THAT(n.status().message(), HasSubstr(c.says));
  }
}

}  // namespace
}  // namespace rdma_transport
