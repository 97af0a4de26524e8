// hello_rdma: a downstream program on rdma_transport. Two endpoints on a
// simulated fabric (no RDMA hardware): the server listens, the client
// connects, the server sends the descriptor of a registered region, the
// client RDMA WRITEs into it and says so with a message, the server checks
// the bytes and answers.
//
//   bazel run //:hello_rdma
//
// Exit status 0 when every step worked, 1 otherwise. In production, pass an
// IbverbsBackend (@rdma_transport//verbs_shim:ibverbs_backend) instead of
// the SimVerbs and a real device name.
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sim/fabric.h"
#include "sim/profile_names.h"
#include "sim/sim_verbs.h"
#include "transport/config.h"
#include "transport/connection.h"
#include "transport/context.h"
#include "transport/listener.h"
#include "transport/memory_region.h"
#include "verbs_shim/env_thread.h"

namespace {

using rdma_transport::Connection;
using rdma_transport::Context;
using std::chrono::seconds;

int Fail(const char* what, const absl::Status& status) {
  std::printf("FAILED: %s: %s\n", what, status.ToString().c_str());
  return 1;
}

std::span<const std::byte> Bytes(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

int Run() {
  namespace sim = rdma_transport::sim;
  sim::Fabric fabric;
  sim::SimVerbs verbs(&fabric);
  // On the simulator the transport runs on the fabric's virtual clock:
  // deadlines come from its Env, and threads join it with RunInThread.
  rdma_transport::Env& env = fabric.env();
  absl::StatusOr<sim::DeviceProfile> profile = sim::ProfileByName("cx7");
  if (!profile.ok()) return Fail("profile", profile.status());
  absl::StatusOr<std::string> client_device =
      fabric.AddDevice(*profile, std::nullopt, "10.0.0.1");
  absl::StatusOr<std::string> server_device =
      fabric.AddDevice(*profile, std::nullopt, "10.0.0.2");
  if (!client_device.ok()) return Fail("client device", client_device.status());
  if (!server_device.ok()) return Fail("server device", server_device.status());

  absl::StatusOr<rdma_transport::TransportConfig> config =
      rdma_transport::LoadTransportConfig();
  if (!config.ok()) return Fail("configuration", config.status());
  absl::StatusOr<std::unique_ptr<Context>> client_context =
      Context::Open(verbs, *client_device, *config);
  if (!client_context.ok()) return Fail("client open", client_context.status());
  absl::StatusOr<std::unique_ptr<Context>> server_context =
      Context::Open(verbs, *server_device, *config);
  if (!server_context.ok()) return Fail("server open", server_context.status());

  absl::StatusOr<std::unique_ptr<rdma_transport::Listener>> listener =
      rdma_transport::Listener::Create(**server_context, "127.0.0.1:0");
  if (!listener.ok()) return Fail("listen", listener.status());
  auto dial = rdma_transport::RunInThread(env, [&] {
    return rdma_transport::Connect(**client_context, (*listener)->address());
  });
  absl::StatusOr<std::unique_ptr<Connection>> server =
      (*listener)->Accept(env.DeadlineIn(seconds(10)));
  absl::StatusOr<std::unique_ptr<Connection>> client = dial.Get();
  if (!client.ok()) return Fail("connect", client.status());
  if (!server.ok()) return Fail("accept", server.status());
  std::printf("connected   %s\n", (*client)->name().c_str());

  // The server exposes 64 KiB for the client to write.
  std::vector<std::byte> target(64 * 1024);
  absl::StatusOr<rdma_transport::MemoryRegion> target_region =
      (*server_context)
          ->RegisterMemory(target, rdma_transport::MemoryAccess::kRemoteWrite);
  if (!target_region.ok()) return Fail("register", target_region.status());
  std::array<std::byte, rdma_transport::RemoteRegion::kEncodedSize> descriptor;
  target_region->remote().Encode(descriptor);
  if (absl::Status s = (*server)->Send(descriptor); !s.ok()) {
    return Fail("send descriptor", s);
  }

  // The client receives it and writes a pattern there.
  std::array<std::byte, rdma_transport::RemoteRegion::kEncodedSize> received;
  absl::StatusOr<size_t> n =
      (*client)->Receive(received, env.DeadlineIn(seconds(5)));
  if (!n.ok()) return Fail("receive descriptor", n.status());
  const rdma_transport::RemoteRegion remote =
      rdma_transport::RemoteRegion::Decode(received);
  std::vector<std::byte> source(target.size());
  for (size_t i = 0; i < source.size(); ++i) {
    source[i] = static_cast<std::byte>(i * 7 + 3);
  }
  absl::StatusOr<rdma_transport::MemoryRegion> source_region =
      (*client_context)
          ->RegisterMemory(source, rdma_transport::MemoryAccess::kLocalOnly);
  if (!source_region.ok()) return Fail("register", source_region.status());
  const rdma_transport::RdmaOp write = {.local = &*source_region,
                                        .local_offset = 0,
                                        .length = source.size(),
                                        .remote = remote,
                                        .remote_offset = 0};
  if (absl::Status s = (*client)->Write({&write, 1}); !s.ok()) {
    return Fail("RDMA WRITE", s);
  }
  if (absl::Status s = (*client)->Send(Bytes("written")); !s.ok()) {
    return Fail("send", s);
  }

  // The server sees the message, then the bytes, and answers.
  std::array<std::byte, 64> message;
  n = (*server)->Receive(message, env.DeadlineIn(seconds(5)));
  if (!n.ok()) return Fail("receive", n.status());
  const bool same =
      std::memcmp(target.data(), source.data(), target.size()) == 0;
  std::printf("server got  \"%.*s\"; %zu bytes written by RDMA WRITE: %s\n",
              static_cast<int>(*n),
              reinterpret_cast<const char*>(message.data()), target.size(),
              same ? "match" : "DIFFER");
  if (!same) return Fail("check", absl::DataLossError("bytes differ"));
  if (absl::Status s = (*server)->Send(Bytes("thanks")); !s.ok()) {
    return Fail("reply", s);
  }
  n = (*client)->Receive(message, env.DeadlineIn(seconds(5)));
  if (!n.ok()) return Fail("receive reply", n.status());
  std::printf("client got  \"%.*s\"\n", static_cast<int>(*n),
              reinterpret_cast<const char*>(message.data()));

  if (absl::Status s = (*client)->Close(env.DeadlineIn(seconds(5))); !s.ok()) {
    return Fail("close", s);
  }
  std::printf("OK\n");
  return 0;
}

}  // namespace

int main() { return Run(); }
