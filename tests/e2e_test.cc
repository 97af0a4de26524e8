// The end-to-end suite: written once against the transport API, run on every
// backend (test_backend.h). Nothing here knows which backend it runs on,
// except the checks guarded by backend().fabric(), which only a simulator can
// make (NIC counters, leaked verbs objects).
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "tests/connection_test_peer.h"
#include "tests/e2e_fixture.h"
#include "transport/handshake.h"
#include "transport/inline_size.h"
#include "transport/peer_region.h"
#include "transport/tcp.h"
#include "verbs_shim/env_thread.h"
#include "verbs_shim/verbs_error.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

std::span<const std::byte> Bytes(std::string_view text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

std::string Text(std::span<const std::byte> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

TEST_F(EndToEndTest, ConnectsAndExchangesMessagesBothWays) {
  absl::StatusOr<ConnectionPair> pair = ConnectPair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  E2E_ASSERT_OK(pair->client->Send(Bytes("hello server")));
  E2E_ASSERT_OK(pair->server->Send(Bytes("hello client")));
  std::vector<std::byte> buffer(4096);
  absl::StatusOr<size_t> n = pair->server->Receive(buffer, In(seconds(5)));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(Text({buffer.data(), *n}), "hello server");
  n = pair->client->Receive(buffer, In(seconds(5)));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(Text({buffer.data(), *n}), "hello client");
  EXPECT_GT(pair->client->usable_inline(), 0u);
  E2E_ASSERT_OK(pair->client->Close(In(seconds(5))));
  E2E_ASSERT_OK(pair->server->Close(In(seconds(5))));
}

// Sends `count` messages of stream `stream` on `connection`.
absl::Status SendStream(Connection& connection, uint64_t stream, int count) {
  std::vector<std::byte> buffer(connection.max_message_size());
  for (int seq = 0; seq < count; ++seq) {
    const size_t length =
        MessageLength(stream, seq, connection.max_message_size());
    FillMessage(stream, seq, {buffer.data(), length});
    absl::Status status = connection.Send(
        {buffer.data(), length}, connection.env().DeadlineIn(seconds(30)));
    if (!status.ok()) return WithContext(status, absl::StrCat("message ", seq));
  }
  return absl::OkStatus();
}

// Receives and checks `count` messages of stream `stream`.
absl::Status ReceiveStream(Connection& connection, uint64_t stream, int count,
                           size_t max_length) {
  std::vector<std::byte> buffer(max_length);
  for (int seq = 0; seq < count; ++seq) {
    absl::StatusOr<size_t> n =
        connection.Receive(buffer, connection.env().DeadlineIn(seconds(30)));
    if (!n.ok()) return WithContext(n.status(), absl::StrCat("message ", seq));
    if (*n != MessageLength(stream, seq, max_length)) {
      return absl::DataLossError(
          absl::StrCat("message ", seq, " has ", *n, " bytes, expected ",
                       MessageLength(stream, seq, max_length)));
    }
    if (std::string diff = CheckMessage(stream, seq, {buffer.data(), *n});
        !diff.empty()) {
      return absl::DataLossError(diff);
    }
  }
  return absl::OkStatus();
}

TEST_F(EndToEndTest, ManyRandomSizedMessagesBothDirectionsAtOnce) {
  ConnectionOptions options;
  options.max_message_size = 4096;
  options.recv_slots = 32;
  options.send_slots = 32;
  absl::StatusOr<ConnectionPair> pair = ConnectPair(options);
  ASSERT_TRUE(pair.ok()) << pair.status();
  const int count = Scaled(100000);
  auto client_send =
      RunInThread(env(), [&] { return SendStream(*pair->client, 1, count); });
  auto server_send =
      RunInThread(env(), [&] { return SendStream(*pair->server, 2, count); });
  auto client_receive = RunInThread(
      env(), [&] { return ReceiveStream(*pair->client, 2, count, 4096); });
  absl::Status server_received = ReceiveStream(*pair->server, 1, count, 4096);
  E2E_ASSERT_OK(server_received);
  E2E_ASSERT_OK(client_receive.Get());
  E2E_ASSERT_OK(client_send.Get());
  E2E_ASSERT_OK(server_send.Get());

  const ConnectionStats client = pair->client->stats();
  const ConnectionStats server = pair->server->stats();
  EXPECT_EQ(client.messages_sent, static_cast<uint64_t>(count));
  EXPECT_EQ(server.messages_received, static_cast<uint64_t>(count));
  EXPECT_EQ(server.messages_sent, static_cast<uint64_t>(count));
  EXPECT_EQ(client.messages_received, static_cast<uint64_t>(count));
  EXPECT_EQ(client.bytes_sent, server.bytes_received);
  EXPECT_GT(client.inline_sends, 0u);
  if (sim::Fabric* fabric = backend().fabric()) {
    EXPECT_EQ(fabric->Counters().rnr_naks, 0u)
        << "flow control let an RNR through";
  }
  E2E_ASSERT_OK(pair->client->Close(In(seconds(5))));
}

TEST_F(EndToEndTest, SendsThatFitGoInlineAndOthersDoNot) {
  absl::StatusOr<ConnectionPair> pair = ConnectPair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  const uint32_t usable = pair->client->usable_inline();
  ASSERT_GT(usable, 0u);
  std::vector<std::byte> message(usable + 1);
  std::vector<std::byte> buffer(4096);
  const std::vector<size_t> sizes = {0, 1, 8, usable - 1, usable, usable + 1};
  uint64_t expected_inline = 0;
  sim::SimCounters before;
  if (sim::Fabric* fabric = backend().fabric()) {
    before = *fabric->DeviceCounters(backend().client_device());
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    FillMessage(7, i, {message.data(), sizes[i]});
    E2E_ASSERT_OK(pair->client->Send({message.data(), sizes[i]}));
    if (sizes[i] <= usable) ++expected_inline;
    EXPECT_EQ(pair->client->stats().inline_sends, expected_inline)
        << "after a " << sizes[i] << "-byte send (usable inline " << usable
        << ")";
    absl::StatusOr<size_t> n = pair->server->Receive(buffer, In(seconds(5)));
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(*n, sizes[i]);
    EXPECT_EQ(CheckMessage(7, i, {buffer.data(), *n}), "");
  }
  if (sim::Fabric* fabric = backend().fabric()) {
    // What the NIC saw: inline sends need no DMA read of their payload; the
    // one larger send is read from host memory.
    sim::SimCounters after = *fabric->DeviceCounters(backend().client_device());
    EXPECT_EQ(after.inline_sends - before.inline_sends, expected_inline);
    EXPECT_EQ(after.dma_read_bytes - before.dma_read_bytes, usable + 1);
  }
}

// Receive() posts the slots it empties together, just before their credits
// go back (transport/receive_reposts.h): one PostRecv per credit batch, not
// one per message. Every message still arrives, in order.
TEST_F(EndToEndTest, ReceivesAreRepostedOncePerCreditBatch) {
  ConnectionOptions options;
  options.recv_slots = 16;  // a credit batch of 8
  absl::StatusOr<ConnectionPair> pair = ConnectPair(options);
  ASSERT_TRUE(pair.ok()) << pair.status();
  const int total = Scaled(800);
  sim::Fabric* fabric = backend().fabric();
  const sim::SimCounters before =
      fabric != nullptr ? fabric->Counters() : sim::SimCounters{};
  auto sender = RunInThread(env(), [&] {
    std::vector<std::byte> message(48);
    for (int seq = 0; seq < total; ++seq) {
      FillMessage(4, seq, message);
      absl::Status status = pair->client->Send(message, In(seconds(30)));
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  });
  std::vector<std::byte> buffer(64);
  for (int seq = 0; seq < total; ++seq) {
    absl::StatusOr<size_t> n = pair->server->Receive(buffer, In(seconds(30)));
    ASSERT_TRUE(n.ok()) << "message " << seq << ": " << n.status();
    ASSERT_EQ(CheckMessage(4, seq, {buffer.data(), *n}), "");
  }
  E2E_ASSERT_OK(sender.Get());
  if (fabric != nullptr) {
    const sim::SimCounters after = fabric->Counters();
    // The server's reposts, one call per 8 messages, and the client's, one
    // per credit message it received (also one per 8).
    const uint64_t calls = after.post_recv_calls - before.post_recv_calls;
    EXPECT_LE(calls, static_cast<uint64_t>(total / 8 * 2 + 4));
    EXPECT_GE(after.recv_wrs_posted - before.recv_wrs_posted,
              static_cast<uint64_t>(total - 16));
    EXPECT_EQ(after.rnr_naks, before.rnr_naks);
  }
}

TEST_F(EndToEndTest, FlowControlHoldsTheSenderWhileTheReceiverIsSlow) {
  ConnectionOptions options;
  options.recv_slots = 8;
  options.send_slots = 16;
  absl::StatusOr<ConnectionPair> pair = ConnectPair(options);
  ASSERT_TRUE(pair.ok()) << pair.status();
  std::vector<std::byte> message(64);
  // Without the receiver taking anything, the sender may fill all but the
  // reserved control slot, and then waits.
  int sent = 0;
  while (sent < 100) {
    FillMessage(3, sent, message);
    absl::Status status = pair->client->Send(message, In(milliseconds(50)));
    if (absl::IsDeadlineExceeded(status)) break;
    E2E_ASSERT_OK(status);
    ++sent;
  }
  EXPECT_EQ(sent, 6);  // 8 credits less the two kept in reserve
  // A slow receiver: the sender keeps going as credits come back.
  const int total = Scaled(2000);
  auto sender = RunInThread(env(), [&] {
    for (int seq = sent; seq < total; ++seq) {
      FillMessage(3, seq, message);
      absl::Status status = pair->client->Send(message, In(seconds(30)));
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  });
  std::vector<std::byte> buffer(64);
  for (int seq = 0; seq < total; ++seq) {
    if (seq % 16 == 0) std::this_thread::yield();
    absl::StatusOr<size_t> n = pair->server->Receive(buffer, In(seconds(30)));
    ASSERT_TRUE(n.ok()) << "message " << seq << ": " << n.status();
    ASSERT_EQ(CheckMessage(3, seq, {buffer.data(), *n}), "");
  }
  E2E_ASSERT_OK(sender.Get());
  EXPECT_GT(pair->server->stats().credit_messages_sent, 0u);
  if (sim::Fabric* fabric = backend().fabric()) {
    EXPECT_EQ(fabric->Counters().rnr_naks, 0u);
  }
}

// A region of `size` bytes the peer may read and write.
struct Region {
  std::vector<std::byte> memory;
  MemoryRegion registered;
};

absl::StatusOr<std::unique_ptr<Region>> MakeRegion(Context& context,
                                                   size_t size, int access) {
  auto region = std::make_unique<Region>();
  region->memory.resize(size);
  absl::StatusOr<MemoryRegion> registered =
      context.RegisterMemory(region->memory, access);
  if (!registered.ok()) return registered.status();
  region->registered = *std::move(registered);
  return region;
}

TEST_F(EndToEndTest, WriteAndReadFromOneByteTo16MiB) {
  absl::StatusOr<ConnectionPair> pair = ConnectPair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  const size_t max_size = 16u << 20;
  auto local = MakeRegion(client_context(), max_size, kLocalWrite);
  auto remote =
      MakeRegion(server_context(), max_size, kRemoteRead | kRemoteWrite);
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_TRUE(remote.ok()) << remote.status();
  const RemoteRegion descriptor = (*remote)->registered.remote();
  uint64_t seq = 0;
  for (size_t size = 1; size <= max_size; size *= 4) {
    ++seq;
    // WRITE local -> remote.
    FillMessage(11, seq, {(*local)->memory.data(), size});
    RdmaOp write{&(*local)->registered, 0, size, descriptor, 0};
    E2E_ASSERT_OK(pair->client->Write({&write, 1}));
    ASSERT_EQ(CheckMessage(11, seq, {(*remote)->memory.data(), size}), "")
        << size << "-byte write";
    // READ it back into a cleared buffer.
    std::fill_n((*local)->memory.begin(), size, std::byte{0});
    RdmaOp read{&(*local)->registered, 0, size, descriptor, 0};
    E2E_ASSERT_OK(pair->client->Read({&read, 1}));
    ASSERT_EQ(CheckMessage(11, seq, {(*local)->memory.data(), size}), "")
        << size << "-byte read";
  }
  // One batch of many small writes to distinct offsets.
  std::vector<RdmaOp> ops;
  for (size_t i = 0; i < 100; ++i) {
    FillMessage(12, i, {(*local)->memory.data() + i * 512, 512});
    ops.push_back({&(*local)->registered, i * 512, 512, descriptor,
                   max_size - (i + 1) * 512});
  }
  E2E_ASSERT_OK(pair->client->Write(ops));
  for (size_t i = 0; i < 100; ++i) {
    ASSERT_EQ(
        CheckMessage(
            12, i, {(*remote)->memory.data() + max_size - (i + 1) * 512, 512}),
        "")
        << "batched write " << i;
  }
  EXPECT_EQ(pair->client->stats().rdma_writes, seq + 100);
}

TEST_F(EndToEndTest, RemoteRangesAreCheckedBeforePosting) {
  absl::StatusOr<ConnectionPair> pair = ConnectPair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  auto local = MakeRegion(client_context(), 4096, kLocalWrite);
  auto remote = MakeRegion(server_context(), 4096, kRemoteWrite);
  ASSERT_TRUE(local.ok() && remote.ok());
  const RemoteRegion descriptor = (*remote)->registered.remote();
  RdmaOp past_end{&(*local)->registered, 0, 16, descriptor, 4090};
  absl::Status status = pair->client->Write({&past_end, 1});
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(status.message(),
              HasSubstr("outside the peer's 4096-byte region"));
  RdmaOp overflow{&(*local)->registered, 0, 16, descriptor, ~uint64_t{0} - 4};
  EXPECT_EQ(pair->client->Write({&overflow, 1}).code(),
            absl::StatusCode::kOutOfRange);
  RdmaOp local_past_end{&(*local)->registered, 4000, 200, descriptor, 0};
  EXPECT_EQ(pair->client->Write({&local_past_end, 1}).code(),
            absl::StatusCode::kOutOfRange);
  // Nothing was posted: the connection is still fine.
  E2E_ASSERT_OK(pair->client->status());
  E2E_ASSERT_OK(pair->client->Check(In(seconds(5))));
  // A region registered without remote access hands out no descriptor.
  auto private_region = MakeRegion(server_context(), 4096, kLocalWrite);
  ASSERT_TRUE(private_region.ok());
  EXPECT_EQ((*private_region)->registered.remote().length, 0u);
  EXPECT_EQ((*private_region)->registered.remote().rkey, 0u);
}

TEST_F(EndToEndTest, WriteToARegionWithoutRemoteWriteFailsTheConnection) {
  absl::StatusOr<ConnectionPair> pair = ConnectPair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  auto local = MakeRegion(client_context(), 4096, kLocalWrite);
  auto read_only = MakeRegion(server_context(), 4096, kRemoteRead);
  ASSERT_TRUE(local.ok() && read_only.ok());
  RdmaOp write{&(*local)->registered, 0, 64, (*read_only)->registered.remote(),
               0};
  absl::Status status = pair->client->Write({&write, 1});
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("RDMA_WRITE"));
  EXPECT_THAT(status.message(), HasSubstr("IBV_WC_REM_ACCESS_ERR"));
  // The connection refuses new work with the same error.
  EXPECT_EQ(pair->client->Send(Bytes("x")), status);
  EXPECT_EQ(pair->client->status(), status);
}

// Memory for one peer (peer_region.h): a range bound to A's connection is
// written and read by A, byte for byte; B's WRITE and READ with A's rkey
// (same server Context, same PD) fail with a remote access error, fail B's
// connection with a typed Status and leave the memory untouched.
TEST_F(EndToEndTest, RegionBoundToOnePeerRefusesAnother) {
  absl::StatusOr<ConnectionPair> a = ConnectPair();
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<ConnectionPair> b_writer = ConnectPair();
  ASSERT_TRUE(b_writer.ok()) << b_writer.status();
  absl::StatusOr<ConnectionPair> b_reader = ConnectPair();
  ASSERT_TRUE(b_reader.ok()) << b_reader.status();
  constexpr size_t kSize = 256 << 10;
  constexpr size_t kOffset = 64 << 10;
  constexpr size_t kLength = 64 << 10;
  auto shared = MakeRegion(server_context(), kSize, kLocalWrite | kBindable);
  auto local = MakeRegion(client_context(), kLength, kLocalWrite);
  ASSERT_TRUE(shared.ok()) << shared.status();
  ASSERT_TRUE(local.ok()) << local.status();
  std::fill((*shared)->memory.begin(), (*shared)->memory.end(), std::byte{7});
  // Registered for binding only: the region's own rkey grants nothing.
  EXPECT_EQ((*shared)->registered.remote().rkey, 0u);

  absl::StatusOr<PeerRegion> for_a = a->server->BindRegion(
      (*shared)->registered, kOffset, kLength, kRemoteRead | kRemoteWrite);
  ASSERT_TRUE(for_a.ok()) << for_a.status();
  ASSERT_TRUE(for_a->valid());
  const RemoteRegion descriptor = for_a->remote();
  EXPECT_EQ(descriptor.address,
            reinterpret_cast<uint64_t>((*shared)->memory.data() + kOffset));
  EXPECT_EQ(descriptor.length, kLength);
  EXPECT_EQ(a->server->stats().regions_bound, 1u);

  // A writes the whole window, then reads it back into a cleared buffer.
  auto a_writes_and_reads = [&](uint64_t seq) {
    FillMessage(21, seq, (*local)->memory);
    RdmaOp write{&(*local)->registered, 0, kLength, descriptor, 0};
    E2E_ASSERT_OK(a->client->Write({&write, 1}));
    ASSERT_EQ(
        CheckMessage(21, seq, {(*shared)->memory.data() + kOffset, kLength}),
        "");
    std::fill((*local)->memory.begin(), (*local)->memory.end(), std::byte{0});
    RdmaOp read{&(*local)->registered, 0, kLength, descriptor, 0};
    E2E_ASSERT_OK(a->client->Read({&read, 1}));
    ASSERT_EQ(CheckMessage(21, seq, (*local)->memory), "");
  };
  ASSERT_NO_FATAL_FAILURE(a_writes_and_reads(1));

  // B's WRITE with A's rkey: a remote access error, nothing lands.
  std::vector<std::byte> before = (*shared)->memory;
  FillMessage(22, 1, (*local)->memory);
  RdmaOp b_write{&(*local)->registered, 0, 4096, descriptor, 0};
  absl::Status written = b_writer->client->Write({&b_write, 1});
  EXPECT_EQ(written.code(), absl::StatusCode::kPermissionDenied) << written;
  EXPECT_THAT(written.message(), HasSubstr("IBV_WC_REM_ACCESS_ERR"));
  EXPECT_EQ(b_writer->client->status(), written);
  EXPECT_TRUE((*shared)->memory == before) << "B's write landed";
  // The server's QP of B went to error (IBV_EVENT_QP_ACCESS_ERR): its
  // connection reports a failure too.
  EXPECT_FALSE(b_writer->server->Check(In(seconds(10))).ok());

  // B's READ with A's rkey: the same, and nothing is read.
  std::fill((*local)->memory.begin(), (*local)->memory.end(), std::byte{0});
  RdmaOp b_read{&(*local)->registered, 0, 4096, descriptor, 0};
  absl::Status read = b_reader->client->Read({&b_read, 1});
  EXPECT_EQ(read.code(), absl::StatusCode::kPermissionDenied) << read;
  EXPECT_THAT(read.message(), HasSubstr("IBV_WC_REM_ACCESS_ERR"));
  EXPECT_THAT(read.message(), HasSubstr("RDMA_READ"));
  EXPECT_EQ((*local)->memory[0], std::byte{0});
  EXPECT_EQ((*local)->memory[4095], std::byte{0});

  // A is unaffected.
  ASSERT_NO_FATAL_FAILURE(a_writes_and_reads(2));
  E2E_ASSERT_OK(a->client->Check(In(seconds(10))));

  // Closing A's server connection deallocates the window.
  E2E_ASSERT_OK(a->client->Close(In(seconds(10))));
  E2E_ASSERT_OK(a->server->Close(In(seconds(10))));
  EXPECT_FALSE(for_a->valid());
  E2E_ASSERT_OK(for_a->Release());
}

// A released binding's rkey is dead at once; the errors of BindRegion.
TEST_F(EndToEndTest, ReleasedRegionIsRefusedAndBadBindingsAreErrors) {
  absl::StatusOr<ConnectionPair> pair = ConnectPair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  auto shared = MakeRegion(server_context(), 8192, kLocalWrite | kBindable);
  auto plain = MakeRegion(server_context(), 8192, kLocalWrite);
  auto local = MakeRegion(client_context(), 8192, kLocalWrite);
  ASSERT_TRUE(shared.ok() && plain.ok() && local.ok());
  Connection& server = *pair->server;
  EXPECT_EQ(server.BindRegion((*shared)->registered, 0, 8192, kLocalWrite)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.BindRegion((*shared)->registered, 0, 0, kRemoteRead)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.BindRegion((*shared)->registered, 4096, 8192, kRemoteRead)
                .status()
                .code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(server.BindRegion((*plain)->registered, 0, 4096, kRemoteRead)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  E2E_ASSERT_OK(server.status());  // nothing was posted

  // Read-only binding: A reads, A's write is refused.
  absl::StatusOr<PeerRegion> read_only =
      server.BindRegion((*shared)->registered, 0, 4096, kRemoteRead);
  ASSERT_TRUE(read_only.ok()) << read_only.status();
  absl::StatusOr<PeerRegion> released =
      server.BindRegion((*shared)->registered, 4096, 4096, kRemoteWrite);
  ASSERT_TRUE(released.ok()) << released.status();
  RdmaOp read{&(*local)->registered, 0, 4096, read_only->remote(), 0};
  E2E_ASSERT_OK(pair->client->Read({&read, 1}));
  const RemoteRegion dead = released->remote();
  E2E_ASSERT_OK(released->Release());
  EXPECT_FALSE(released->valid());
  RdmaOp write{&(*local)->registered, 0, 64, dead, 0};
  absl::Status status = pair->client->Write({&write, 1});
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_THAT(status.message(), HasSubstr("IBV_WC_REM_ACCESS_ERR"));
}

TEST_F(EndToEndTest, ManyConcurrentConnections) {
  const int connections = Scaled(100) < 100 ? 16 : 64;
  ASSERT_NO_FATAL_FAILURE(OpenContexts());
  ConnectionOptions options;
  options.recv_slots = 8;
  options.send_slots = 8;
  options.max_message_size = 1024;
  absl::StatusOr<std::unique_ptr<Listener>> listener = Listener::Create(
      server_context(), ListenAddress(), options, TestListenerOptions());
  ASSERT_TRUE(listener.ok()) << listener.status();
  std::vector<EnvFuture<absl::StatusOr<std::unique_ptr<Connection>>>> dials;
  for (int i = 0; i < connections; ++i) {
    dials.push_back(RunInThread(env(), [&] {
      return Connect(client_context(), (*listener)->address(), options);
    }));
  }
  std::vector<std::unique_ptr<Connection>> servers;
  for (int i = 0; i < connections; ++i) {
    absl::StatusOr<std::unique_ptr<Connection>> accepted =
        (*listener)->Accept(In(seconds(30)));
    if (!accepted.ok()) {
      // Say why: a client whose Connect() gave up leaves Accept() waiting.
      const ListenerStats stats = (*listener)->stats();
      std::string clients_failed;
      for (size_t d = 0; d < dials.size(); ++d) {
        absl::StatusOr<std::unique_ptr<Connection>> dialed = dials[d].Get();
        if (!dialed.ok()) {
          absl::StrAppend(&clients_failed, "\n  client ", d, ": ",
                          dialed.status().ToString());
        }
      }
      FAIL() << "connection " << i << ": " << accepted.status()
             << "; listener: accepted " << stats.accepted << ", timed_out "
             << stats.timed_out << ", dropped " << stats.dropped
             << ", abandoned " << stats.abandoned << ", last failure \""
             << stats.last_failure << "\""
             << (clients_failed.empty() ? "; every client connected"
                                        : clients_failed);
    }
    servers.push_back(*std::move(accepted));
  }
  std::vector<std::unique_ptr<Connection>> clients;
  for (auto& dial : dials) {
    absl::StatusOr<std::unique_ptr<Connection>> connected = dial.Get();
    ASSERT_TRUE(connected.ok()) << connected.status();
    clients.push_back(*std::move(connected));
  }
  EXPECT_EQ((*listener)->stats().accepted, static_cast<uint64_t>(connections));
  // Every client talks on its own connection while every server listens on
  // its own: stream ids are unique, so a server finds its client's stream
  // from the first message.
  const int rounds = Scaled(20);
  std::vector<EnvFuture<absl::Status>> talks;
  for (int i = 0; i < connections; ++i) {
    talks.push_back(RunInThread(
        env(), [&, i] { return SendStream(*clients[i], 100 + i, rounds); }));
  }
  std::vector<EnvFuture<absl::Status>> listens;
  for (int s = 0; s < connections; ++s) {
    listens.push_back(RunInThread(env(), [&, s]() -> absl::Status {
      Connection& server = *servers[s];
      std::vector<std::byte> buffer(1024);
      absl::StatusOr<size_t> n =
          server.Receive(buffer, server.env().DeadlineIn(seconds(30)));
      if (!n.ok()) return n.status();
      int stream = -1;
      for (int i = 0; i < connections && stream < 0; ++i) {
        if (*n == MessageLength(100 + i, 0, 1024) &&
            CheckMessage(100 + i, 0, {buffer.data(), *n}).empty()) {
          stream = 100 + i;
        }
      }
      if (stream < 0) {
        return absl::DataLossError("a server received a message of no client");
      }
      for (int seq = 1; seq < rounds; ++seq) {
        n = server.Receive(buffer, server.env().DeadlineIn(seconds(30)));
        if (!n.ok()) return n.status();
        if (std::string diff = CheckMessage(stream, seq, {buffer.data(), *n});
            !diff.empty()) {
          return absl::DataLossError(diff);
        }
      }
      return absl::OkStatus();
    }));
  }
  for (auto& talk : talks) E2E_ASSERT_OK(talk.Get());
  int verified = 0;
  for (auto& listen : listens) {
    E2E_ASSERT_OK(listen.Get());
    ++verified;
  }
  EXPECT_EQ(verified, connections);
}

TEST_F(EndToEndTest, TrafficClassAndServiceLevelReachTheQp) {
  TransportOptions options;
  options.traffic_class = 136;
  options.service_level = 3;
  ASSERT_NO_FATAL_FAILURE(OpenContexts(options));
  absl::StatusOr<ConnectionPair> pair = ConnectPair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  for (Connection* connection : {pair->client.get(), pair->server.get()}) {
    ibv_qp_attr attr = {};
    ibv_qp_init_attr init = {};
    E2E_ASSERT_OK(backend().verbs().QueryQp(connection->qp(), &attr,
                                            IBV_QP_STATE | IBV_QP_AV, &init));
    EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(attr.ah_attr.is_global, 1);
    EXPECT_EQ(attr.ah_attr.grh.traffic_class, 136) << connection->name();
    // Soft-RoCE keeps no service level in its address vector (RoCE carries
    // none on the wire; priority comes from the traffic class), so
    // ibv_query_qp reports 0 there whatever was set.
    if (connection->context().device_attr().vendor_id != kVendorSoftRoce) {
      EXPECT_EQ(attr.ah_attr.sl, 3) << connection->name();
    }
  }
}

TEST_F(EndToEndTest, DefaultTrafficClassIsZeroInTheQp) {
  TransportOptions options;
  options.traffic_class = -1;
  ASSERT_NO_FATAL_FAILURE(OpenContexts(options));
  absl::StatusOr<ConnectionPair> pair = ConnectPair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  ibv_qp_attr attr = {};
  ibv_qp_init_attr init = {};
  E2E_ASSERT_OK(
      backend().verbs().QueryQp(pair->client->qp(), &attr, IBV_QP_AV, &init));
  EXPECT_EQ(attr.ah_attr.grh.traffic_class, 0);
}

// A message each way, checked: the connection really works.
void ExpectMessagesBothWays(EndToEndTest& test, ConnectionPair& pair) {
  E2E_ASSERT_OK(SendStream(*pair.client, 7, 4));
  E2E_ASSERT_OK(
      ReceiveStream(*pair.server, 7, 4, pair.client->max_message_size()));
  E2E_ASSERT_OK(SendStream(*pair.server, 8, 4));
  E2E_ASSERT_OK(
      ReceiveStream(*pair.client, 8, 4, pair.server->max_message_size()));
}

ibv_qp_attr QueryPath(EndToEndTest& test, const Connection& connection,
                      TestBackend& backend) {
  ibv_qp_attr attr = {};
  ibv_qp_init_attr init = {};
  const absl::Status status = backend.verbs().QueryQp(
      connection.qp(), &attr,
      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_MAX_QP_RD_ATOMIC |
          IBV_QP_MAX_DEST_RD_ATOMIC,
      &init);
  EXPECT_TRUE(status.ok()) << status;
  return attr;
}

TEST_F(EndToEndTest, PeersWithDifferentMtusUseTheSmallerAndSaySo) {
  // The server's MTU is its port's active MTU (4096 on the simulator, 1024
  // over rxe on a 1500-byte link); the client's 1024 (512 over rxe).
  ASSERT_NO_FATAL_FAILURE(OpenContexts());
  const int server_mtu = server_context().mtu();
  const int client_mtu = server_mtu > 1024 ? 1024 : 512;
  TransportOptions client;
  client.mtu = client_mtu;
  ASSERT_NO_FATAL_FAILURE(OpenContexts(client, {}));
  ASSERT_EQ(client_context().mtu(), client_mtu);
  absl::StatusOr<ConnectionPair> pair = ConnectPair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  const std::string expected =
      absl::StrCat("path MTU ", client_mtu, ": this side's active MTU is ");
  for (Connection* connection : {pair->client.get(), pair->server.get()}) {
    SCOPED_TRACE(connection->name());
    EXPECT_EQ(connection->path().protocol_version, kHandshakeVersion);
    EXPECT_EQ(connection->path().path_mtu, client_mtu);
    EXPECT_THAT(connection->path().notes, ::testing::HasSubstr(expected));
    EXPECT_EQ(QueryPath(*this, *connection, backend()).path_mtu,
              *MtuFromBytes(client_mtu));
  }
  EXPECT_EQ(pair->client->path().peer_mtu, server_mtu);
  ExpectMessagesBothWays(*this, *pair);
}

TEST_F(EndToEndTest, ReadDepthIsExchangedAndSetOnBothQps) {
  absl::StatusOr<ConnectionPair> pair = ConnectPair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  const ReadDepth client = LocalReadDepth(client_context());
  const ReadDepth server = LocalReadDepth(server_context());
  EXPECT_EQ(pair->client->path().max_rd_atomic,
            std::min(client.initiator, server.responder));
  EXPECT_EQ(pair->server->path().max_rd_atomic,
            std::min(server.initiator, client.responder));
  for (Connection* connection : {pair->client.get(), pair->server.get()}) {
    SCOPED_TRACE(connection->name());
    const ibv_qp_attr attr = QueryPath(*this, *connection, backend());
    EXPECT_EQ(attr.max_rd_atomic, connection->path().max_rd_atomic);
    EXPECT_EQ(attr.max_dest_rd_atomic, connection->path().max_dest_rd_atomic);
  }
}

TEST_F(EndToEndTest, TheServersTrafficPolicyDecidesAndBothSidesReportIt) {
  TransportOptions client;
  client.traffic_class = 96;
  TransportOptions server;
  server.traffic_class = 136;
  ASSERT_NO_FATAL_FAILURE(OpenContexts(client, server));
  struct Case {
    TrafficPolicy policy;
    int client_tc;
    int server_tc;
  };
  for (const Case& c : {Case{TrafficPolicy::kEachSideOwn, 96, 136},
                        Case{TrafficPolicy::kServerImposes, 136, 136},
                        Case{TrafficPolicy::kServerAdoptsClient, 96, 96}}) {
    SCOPED_TRACE(static_cast<int>(c.policy));
    ListenerOptions listener = TestListenerOptions();
    listener.traffic_policy = c.policy;
    absl::StatusOr<ConnectionPair> pair = ConnectPair({}, {}, listener);
    ASSERT_TRUE(pair.ok()) << pair.status();
    EXPECT_EQ(pair->client->path().traffic_class,
              std::optional<uint8_t>(c.client_tc));
    EXPECT_EQ(pair->server->path().traffic_class,
              std::optional<uint8_t>(c.server_tc));
    EXPECT_EQ(
        QueryPath(*this, *pair->client, backend()).ah_attr.grh.traffic_class,
        c.client_tc);
    EXPECT_EQ(
        QueryPath(*this, *pair->server, backend()).ah_attr.grh.traffic_class,
        c.server_tc);
    EXPECT_EQ(pair->client->path().traffic_from_peer,
              c.policy == TrafficPolicy::kServerImposes);
    if (c.policy == TrafficPolicy::kServerImposes) {
      EXPECT_THAT(pair->client->path().notes,
                  ::testing::HasSubstr("the server set traffic class 136"));
    }
    ExpectMessagesBothWays(*this, *pair);
  }
}

TEST_F(EndToEndTest, AProtocol2ClientAndOneWithAnUnknownExtensionConnect) {
  ASSERT_NO_FATAL_FAILURE(OpenContexts());
  ConnectionOptions legacy;
  legacy.max_protocol_version = kLegacyHandshakeVersion;
  absl::StatusOr<ConnectionPair> old =
      ConnectPair(legacy, {}, TestListenerOptions());
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->client->path().protocol_version, kLegacyHandshakeVersion);
  EXPECT_EQ(old->server->path().protocol_version, kLegacyHandshakeVersion);
  ExpectMessagesBothWays(*this, *old);

  // A later version's HELLO: an extension this one does not know.
  ConnectionOptions later;
  later.extra_hello_extensions = {{0x0777, {1, 2, 3}}};
  absl::StatusOr<ConnectionPair> newer =
      ConnectPair(later, {}, TestListenerOptions());
  ASSERT_TRUE(newer.ok()) << newer.status();
  EXPECT_EQ(newer->server->path().protocol_version, kHandshakeVersion);
  ExpectMessagesBothWays(*this, *newer);

  // ... unless the sender marked it as one the server must understand.
  later.extra_hello_extensions = {{0x8777, {}}};
  later.handshake_timeout = seconds(2);
  absl::StatusOr<ConnectionPair> refused =
      ConnectPair(later, later, TestListenerOptions());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition)
      << refused.status();
  EXPECT_THAT(refused.status().message(),
              ::testing::HasSubstr("unknown critical extension 0x8777"));
}

// Runs a listener's Accept loop on a thread until one real connection.
class AcceptInBackground {
 public:
  AcceptInBackground(Env& env, Listener& listener)
      : accepted_(RunInThread(env, [&env, &listener] {
          return listener.Accept(env.DeadlineIn(seconds(20)));
        })) {}
  absl::StatusOr<std::unique_ptr<Connection>> Get() { return accepted_.Get(); }

 private:
  EnvFuture<absl::StatusOr<std::unique_ptr<Connection>>> accepted_;
};

// Sends raw bytes to `address` and returns what the server answers, decoded.
absl::StatusOr<Socket> Dial(Env& env, const std::string& address) {
  absl::StatusOr<SetupStream> stream =
      SetupNetworkOf(env).Connect(env, address, env.DeadlineIn(seconds(5)));
  if (!stream.ok()) return stream.status();
  return Socket(stream->fd);
}

absl::StatusOr<HandshakeMessage> RawHandshake(Env& env,
                                              const std::string& address,
                                              std::vector<uint8_t> bytes) {
  absl::StatusOr<Socket> socket = Dial(env, address);
  if (!socket.ok()) return socket.status();
  if (absl::Status status =
          WriteAll(env, socket->fd(), bytes, env.DeadlineIn(seconds(5)));
      !status.ok()) {
    return status;
  }
  uint8_t header[kHandshakeHeaderSize];
  if (absl::Status status =
          ReadExact(env, socket->fd(), header, env.DeadlineIn(seconds(5)));
      !status.ok()) {
    return status;
  }
  absl::StatusOr<HandshakeHeader> decoded = DecodeHandshakeHeader(header);
  if (!decoded.ok()) return decoded.status();
  std::vector<uint8_t> body(decoded->body_length);
  if (absl::Status status =
          ReadExact(env, socket->fd(), body, env.DeadlineIn(seconds(5)));
      !status.ok()) {
    return status;
  }
  return DecodeHandshakeBody(*decoded, body);
}

std::vector<uint8_t> Header(uint32_t magic, uint16_t version, uint8_t type,
                            uint32_t length) {
  return {static_cast<uint8_t>(magic >> 24),
          static_cast<uint8_t>(magic >> 16),
          static_cast<uint8_t>(magic >> 8),
          static_cast<uint8_t>(magic),
          static_cast<uint8_t>(version >> 8),
          static_cast<uint8_t>(version),
          type,
          0,
          static_cast<uint8_t>(length >> 24),
          static_cast<uint8_t>(length >> 16),
          static_cast<uint8_t>(length >> 8),
          static_cast<uint8_t>(length)};
}

TEST_F(EndToEndTest, HandshakesFromStrangersAreRejectedAndServingGoesOn) {
  ASSERT_NO_FATAL_FAILURE(OpenContexts());
  ConnectionOptions options;
  options.token = "s3cret";
  options.handshake_timeout = milliseconds(500);
  absl::StatusOr<std::unique_ptr<Listener>> listener = Listener::Create(
      server_context(), ListenAddress(), options, TestListenerOptions());
  ASSERT_TRUE(listener.ok()) << listener.status();
  const std::string address = (*listener)->address();
  AcceptInBackground accept(env(), **listener);

  struct Case {
    const char* what;
    std::vector<uint8_t> bytes;
    const char* reason;
  };
  std::string http = "GET / HTTP/1.1\r\n";
  const std::vector<Case> cases = {
      {"wrong magic", std::vector<uint8_t>(http.begin(), http.end()), "magic"},
      {"wrong version", Header(kHandshakeMagic, kHandshakeVersion + 1, 1, 0),
       "version"},
      {"1 GiB length prefix",
       Header(kHandshakeMagic, kHandshakeVersion, 1, 1u << 30),
       "exceeds the maximum"},
      {"READY before HELLO", Header(kHandshakeMagic, kHandshakeVersion, 3, 0),
       "expected HELLO"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<HandshakeMessage> reply =
        RawHandshake(env(), address, c.bytes);
    ASSERT_TRUE(reply.ok()) << c.what << ": " << reply.status();
    EXPECT_EQ(reply->type, HandshakeType::kReject) << c.what;
    EXPECT_THAT(reply->reason, HasSubstr(c.reason)) << c.what;
  }

  // One byte, then silence: dropped after handshake_timeout, while others
  // are served meanwhile.
  absl::StatusOr<Socket> silent = Dial(env(), address);
  ASSERT_TRUE(silent.ok());
  const uint8_t one_byte = 0x52;
  E2E_ASSERT_OK(WriteAll(env(), silent->fd(), {&one_byte, 1}, In(seconds(1))));

  // A client with the wrong token is told so.
  ConnectionOptions wrong = options;
  wrong.token = "guess";
  absl::StatusOr<std::unique_ptr<Connection>> refused =
      Connect(client_context(), address, wrong);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("wrong token"));

  // A real client still gets through.
  absl::StatusOr<std::unique_ptr<Connection>> client =
      Connect(client_context(), address, options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<std::unique_ptr<Connection>> server = accept.Get();
  ASSERT_TRUE(server.ok()) << server.status();
  E2E_ASSERT_OK((*client)->Send(Bytes("through")));
  std::vector<std::byte> buffer(64);
  absl::StatusOr<size_t> n = (*server)->Receive(buffer, In(seconds(5)));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(Text({buffer.data(), *n}), "through");

  // The silent one times out on a later Accept.
  absl::StatusOr<std::unique_ptr<Connection>> none =
      (*listener)->Accept(In(seconds(1)));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kDeadlineExceeded);
  const ListenerStats stats = (*listener)->stats();
  EXPECT_EQ(stats.rejected, cases.size() + 1);  // + the wrong token
  EXPECT_EQ(stats.timed_out, 1u);
  EXPECT_EQ(stats.accepted, 1u);
}

// A busy-poll wait polls again at once after an empty poll: a PAUSE per
// turn cost a tenth of the latency and more under emulation (connection.h,
// "Progress"). Nothing else calls into the connection, so the wait never
// lets a thread in and so never pauses, however many turns it spins (63 of
// every 64 on a virtual clock, most on a real one).
TEST_F(EndToEndTest, AnUncontendedBusyPollWaitNeverPauses) {
  ConnectionOptions options;
  options.progress = ProgressMode::kBusyPoll;
  absl::StatusOr<ConnectionPair> pair = ConnectPair(options);
  ASSERT_TRUE(pair.ok()) << pair.status();
  std::vector<std::byte> buffer(64);
  absl::StatusOr<size_t> n =
      pair->client->Receive(buffer, In(milliseconds(50)));
  EXPECT_EQ(n.status().code(), absl::StatusCode::kDeadlineExceeded);
  // And a message that arrives while the receiver spins.
  auto sender = RunInThread(env(), [&] {
    env().SleepUntil(env().DeadlineIn(milliseconds(20)));
    return pair->server->Send(Bytes("late"), In(seconds(5)));
  });
  n = pair->client->Receive(buffer, In(seconds(5)));
  E2E_ASSERT_OK(sender.Get());
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(Text({buffer.data(), *n}), "late");
  EXPECT_EQ(ConnectionTestPeer::SpinPauses(*pair->client), 0u);
  // The waits took service turns (the first wait's deadline was seen by
  // one); a yield is one kind of service turn.
  const ConnectionStats stats = pair->client->stats();
  EXPECT_GT(stats.service_turns, 0u);
  EXPECT_LE(stats.service_yields, stats.service_turns);
}

TEST_F(EndToEndTest, DeadlinesExpireInsteadOfHanging) {
  ConnectionOptions options;
  options.handshake_timeout = milliseconds(300);
  absl::StatusOr<ConnectionPair> pair = ConnectPair(options);
  ASSERT_TRUE(pair.ok()) << pair.status();
  std::vector<std::byte> buffer(64);
  absl::StatusOr<size_t> n =
      pair->client->Receive(buffer, In(milliseconds(50)));
  EXPECT_EQ(n.status().code(), absl::StatusCode::kDeadlineExceeded);
  E2E_ASSERT_OK(pair->client->status());

  // A listener nobody accepts on: the TCP connection is made but the
  // handshake is never answered.
  absl::StatusOr<std::unique_ptr<Listener>> deaf = Listener::Create(
      server_context(), ListenAddress(), options, TestListenerOptions());
  ASSERT_TRUE(deaf.ok());
  const Deadline start = env().Now();
  absl::StatusOr<std::unique_ptr<Connection>> connected =
      Connect(client_context(), (*deaf)->address(), options);
  EXPECT_EQ(connected.status().code(), absl::StatusCode::kDeadlineExceeded)
      << connected.status();
  EXPECT_LT(env().Now() - start, seconds(5));
}

TEST_F(EndToEndTest, PeerDeathMidTransferIsUnavailableEverywhere) {
  absl::StatusOr<ConnectionPair> pair = ConnectPair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  E2E_ASSERT_OK(SendStream(*pair->client, 5, 10));
  E2E_ASSERT_OK(ReceiveStream(*pair->server, 5, 10, 4096));
  E2E_ASSERT_OK(backend().KillPeer(*pair->server));

  // Keep sending until the transport notices; it must within the retry
  // budget, never hang.
  absl::Status status;
  std::vector<std::byte> message(2048);
  const Deadline start = env().Now();
  for (int i = 0; i < 1000 && status.ok(); ++i) {
    status = pair->client->Send(message, In(seconds(10)));
    if (status.ok()) status = pair->client->Check(In(seconds(10)));
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_LT(env().Now() - start, seconds(20));
  // Every later call reports the same.
  EXPECT_EQ(pair->client->Send(message).code(), absl::StatusCode::kUnavailable);
  std::vector<std::byte> buffer(64);
  EXPECT_EQ(pair->client->Receive(buffer, In(seconds(1))).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(pair->client->Check().code(), absl::StatusCode::kUnavailable);
}

TEST_F(EndToEndTest, IdleReceiveNoticesAVanishedPeer) {
  ConnectionOptions options;
  options.keepalive_interval = milliseconds(100);
  absl::StatusOr<ConnectionPair> pair = ConnectPair(options);
  ASSERT_TRUE(pair.ok()) << pair.status();
  E2E_ASSERT_OK(backend().KillPeer(*pair->server));
  std::vector<std::byte> buffer(64);
  absl::StatusOr<size_t> n = pair->client->Receive(buffer, In(seconds(20)));
  EXPECT_EQ(n.status().code(), absl::StatusCode::kUnavailable) << n.status();
  EXPECT_GT(pair->client->stats().keepalives, 0u);
}

TEST_F(EndToEndTest, GracefulCloseUnderLoadDeliversEverythingSentBefore) {
  ConnectionOptions options;
  options.recv_slots = 16;
  absl::StatusOr<ConnectionPair> pair = ConnectPair(options);
  ASSERT_TRUE(pair.ok()) << pair.status();
  const int count = Scaled(5000);
  auto receiver = RunInThread(env(), [&]() -> absl::Status {
    if (absl::Status status = ReceiveStream(*pair->server, 9, count, 4096);
        !status.ok()) {
      return status;
    }
    std::vector<std::byte> buffer(4096);
    absl::StatusOr<size_t> after =
        pair->server->Receive(buffer, In(seconds(30)));
    if (after.ok()) return absl::InternalError("a message after the close");
    if (!absl::IsUnavailable(after.status())) return after.status();
    return absl::OkStatus();
  });
  E2E_ASSERT_OK(SendStream(*pair->client, 9, count));
  E2E_ASSERT_OK(pair->client->Close(In(seconds(30))));
  E2E_ASSERT_OK(receiver.Get());
  EXPECT_EQ(pair->client->Send(Bytes("late")).code(),
            absl::StatusCode::kFailedPrecondition);
  E2E_ASSERT_OK(pair->server->Close(In(seconds(5))));
}

TEST_F(EndToEndTest, EventModeWorksAndItsFdIsPollable) {
  ConnectionOptions options;
  options.progress = ProgressMode::kEvent;
  absl::StatusOr<ConnectionPair> pair = ConnectPair(options);
  ASSERT_TRUE(pair.ok()) << pair.status();
  ASSERT_GE(pair->server->event_fd(), 0);
  std::vector<std::byte> buffer(4096);
  // Blocking receives in event mode, both ways.
  const int rounds = Scaled(500);
  auto echo = RunInThread(env(), [&]() -> absl::Status {
    std::vector<std::byte> echo_buffer(4096);
    for (int i = 0; i < rounds; ++i) {
      absl::StatusOr<size_t> n =
          pair->server->Receive(echo_buffer, In(seconds(30)));
      if (!n.ok()) return n.status();
      if (absl::Status status = pair->server->Send({echo_buffer.data(), *n});
          !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  });
  for (int i = 0; i < rounds; ++i) {
    const size_t length = MessageLength(21, i, 4096);
    std::vector<std::byte> message(length);
    FillMessage(21, i, message);
    E2E_ASSERT_OK(pair->client->Send(message));
    absl::StatusOr<size_t> n = pair->client->Receive(buffer, In(seconds(30)));
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(CheckMessage(21, i, {buffer.data(), *n}), "");
  }
  E2E_ASSERT_OK(echo.Get());

  // The caller's own poll(2) on the fd: nothing pending -> not readable
  // after a Receive that found nothing; a message makes it readable.
  absl::StatusOr<size_t> none =
      pair->server->Receive(buffer, pair->server->env().Now());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kDeadlineExceeded);
  E2E_ASSERT_OK(pair->client->Send(Bytes("wake up")));
  pollfd entry = {pair->server->event_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&entry, 1, 5000), 1) << "event fd never became readable";
  absl::StatusOr<size_t> n =
      pair->server->Receive(buffer, pair->server->env().Now());
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(Text({buffer.data(), *n}), "wake up");
}

}  // namespace
}  // namespace rdma_transport
