// rdma_demo: the transport end to end on the simulator, in one process and
// without RDMA hardware. Two ConnectX-7 NICs on a simulated fabric; a server
// listens, a client connects over the TCP handshake; they exchange messages
// (small ones inline), do an RDMA WRITE and READ of 1 MiB, and measure
// ping-pong latency. Prints what an RDMA engineer checks first: the inline
// size negotiated, the traffic class in the QP, and the latency figures.
//
//   MC_IB_TC=136 bazel run //tools:rdma_demo
//
// Exit status 0 when every check held, 1 otherwise.
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "sim/device_profile.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tools/latency_stats.h"
#include "transport/config.h"
#include "transport/connection.h"
#include "transport/context.h"
#include "transport/listener.h"
#include "verbs_shim/env_thread.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport {
namespace {

using std::chrono::seconds;

int Fail(const std::string& what, const absl::Status& status) {
  std::printf("FAILED: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

int RunDemo() {
  std::printf(
      "rdma_transport demo: two endpoints on a simulated RDMA fabric (sim/),\n"
      "through the same transport code that runs on ConnectX, irdma, eRDMA "
      "and Soft-RoCE.\n\n");

  absl::StatusOr<TransportConfig> config = LoadTransportConfig();
  if (!config.ok()) return Fail("configuration", config.status());

  sim::Fabric fabric;
  sim::SimVerbs verbs(&fabric);
  // The transport's clock is the fabric's (virtual): deadlines come from it.
  Env& env = fabric.env();
  const sim::DeviceProfile profile = sim::ConnectX7();
  absl::StatusOr<std::string> client_device =
      fabric.AddDevice(profile, std::nullopt, "10.0.0.1");
  absl::StatusOr<std::string> server_device =
      fabric.AddDevice(profile, std::nullopt, "10.0.0.2");
  if (!client_device.ok() || !server_device.ok()) {
    return Fail("adding devices", client_device.ok() ? server_device.status()
                                                     : client_device.status());
  }
  std::printf(
      "devices        %s (10.0.0.1) and %s (10.0.0.2): %s, vendor 0x%04x\n",
      client_device->c_str(), server_device->c_str(), profile.model.c_str(),
      profile.vendor_id);

  absl::StatusOr<std::unique_ptr<Context>> client_context =
      Context::Open(verbs, *client_device, *config);
  if (!client_context.ok())
    return Fail("opening client", client_context.status());
  absl::StatusOr<std::unique_ptr<Context>> server_context =
      Context::Open(verbs, *server_device, *config);
  if (!server_context.ok())
    return Fail("opening server", server_context.status());

  ConnectionOptions options;
  options.token = "rdma-demo";  // both sides: the server rejects any other
  absl::StatusOr<std::unique_ptr<Listener>> listener =
      Listener::Create(**server_context, "127.0.0.1:0", options);
  if (!listener.ok()) return Fail("listening", listener.status());
  std::printf("server         listening on %s (TCP handshake)\n",
              (*listener)->address().c_str());
  auto dial = RunInThread(env, [&] {
    return Connect(**client_context, (*listener)->address(), options);
  });
  absl::StatusOr<std::unique_ptr<Connection>> server =
      (*listener)->Accept(env.DeadlineIn(seconds(10)));
  absl::StatusOr<std::unique_ptr<Connection>> client = dial.Get();
  if (!client.ok()) return Fail("connecting", client.status());
  if (!server.ok()) return Fail("accepting", server.status());
  std::printf("connected      QP %u <-> QP %u, RC, in RTS\n",
              (*client)->qp()->qp_num, (*server)->qp()->qp_num);

  const NegotiatedQp& negotiated = (*client)->negotiated_qp();
  std::printf(
      "inline         asked %u B, device granted %u B, usable %u B: messages "
      "up to %u B go inline\n",
      negotiated.requested_inline, negotiated.granted_inline,
      negotiated.usable_inline, negotiated.usable_inline);

  ibv_qp_attr attr = {};
  ibv_qp_init_attr init = {};
  if (absl::Status status =
          verbs.QueryQp((*client)->qp(), &attr,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU, &init);
      !status.ok()) {
    return Fail("querying the QP", status);
  }
  std::printf(
      "traffic class  %u in the QP's GRH (%s), service level %u, path MTU %d\n",
      attr.ah_attr.grh.traffic_class,
      config->traffic_class.has_value() ? "from MC_IB_TC"
                                        : "MC_IB_TC unset: system default",
      attr.ah_attr.sl, MtuBytes(attr.path_mtu));

  // Messages of every size up to 4 KiB, checked byte for byte.
  const int kMessages = 1000;
  std::vector<std::byte> message(4096);
  std::vector<std::byte> received(4096);
  const sim::SimCounters before = fabric.Counters();
  for (int i = 0; i < kMessages; ++i) {
    const size_t length = (i * 37) % 4097;
    for (size_t b = 0; b < length; ++b) {
      message[b] = static_cast<std::byte>((i + b * 7) & 0xff);
    }
    if (absl::Status status = (*client)->Send({message.data(), length});
        !status.ok()) {
      return Fail("sending", status);
    }
    absl::StatusOr<size_t> n =
        (*server)->Receive(received, env.DeadlineIn(seconds(5)));
    if (!n.ok()) return Fail("receiving", n.status());
    if (*n != length ||
        std::memcmp(received.data(), message.data(), length) != 0) {
      return Fail("checking", absl::DataLossError(absl::StrFormat(
                                  "message %d arrived different", i)));
    }
  }
  const sim::SimCounters after = fabric.Counters();
  const ConnectionStats stats = (*client)->stats();
  std::printf(
      "messages       %d sent and verified, %llu inline; the NIC read %llu "
      "payload bytes from host memory (none for the inline ones)\n",
      kMessages, static_cast<unsigned long long>(stats.inline_sends),
      static_cast<unsigned long long>(after.dma_read_bytes -
                                      before.dma_read_bytes));

  // RDMA WRITE 1 MiB into the server's region, READ it back.
  std::vector<std::byte> local(1 << 20);
  std::vector<std::byte> remote(1 << 20);
  for (size_t i = 0; i < local.size(); ++i) {
    local[i] = static_cast<std::byte>((i * 131) >> 3);
  }
  absl::StatusOr<MemoryRegion> local_region =
      (*client_context)->RegisterMemory(local, kLocalWrite);
  absl::StatusOr<MemoryRegion> remote_region =
      (*server_context)->RegisterMemory(remote, kRemoteWrite | kRemoteRead);
  if (!local_region.ok()) return Fail("registering", local_region.status());
  if (!remote_region.ok()) return Fail("registering", remote_region.status());
  RdmaOp write{&*local_region, 0, local.size(), remote_region->remote(), 0};
  if (absl::Status status = (*client)->Write({&write, 1}); !status.ok()) {
    return Fail("RDMA WRITE", status);
  }
  const bool written = remote == local;
  std::fill(local.begin(), local.end(), std::byte{0});
  if (absl::Status status = (*client)->Read({&write, 1}); !status.ok()) {
    return Fail("RDMA READ", status);
  }
  const bool read_back = remote == local;
  std::printf(
      "rdma           1 MiB written into the server's memory (%s) and "
      "read back (%s)\n",
      written ? "verified" : "MISMATCH", read_back ? "verified" : "MISMATCH");
  if (!written || !read_back) return 1;

  // Ping-pong latency, 64 B, the way ib_send_lat measures it.
  const int kIterations = 20000;
  std::vector<double> samples;
  samples.reserve(kIterations);
  std::vector<std::byte> ping(64);
  auto echo = RunInThread(env, [&]() -> absl::Status {
    std::vector<std::byte> buffer(64);
    for (int i = 0; i < kIterations; ++i) {
      absl::StatusOr<size_t> n =
          (*server)->Receive(buffer, env.DeadlineIn(seconds(5)));
      if (!n.ok()) return n.status();
      if (absl::Status status = (*server)->Send({buffer.data(), *n});
          !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  });
  for (int i = 0; i < kIterations; ++i) {
    const Clock::time_point start = Clock::now();
    if (absl::Status status = (*client)->Send(ping); !status.ok()) {
      return Fail("ping", status);
    }
    absl::StatusOr<size_t> n =
        (*client)->Receive(received, env.DeadlineIn(seconds(5)));
    if (!n.ok()) return Fail("pong", n.status());
    samples.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - start)
            .count() /
        2);
  }
  if (absl::Status status = echo.Get(); !status.ok())
    return Fail("echo", status);
  const LatencySummary summary = Summarize(samples);
  std::printf(
      "latency        one-way, 64 B, %d round trips: t_min %.2f us, t_typical "
      "%.2f us, 99%% %.2f us\n"
      "               (a simulated NIC: this is the transport's and the "
      "simulator's software path, not a wire)\n",
      kIterations, summary.t_min_us, summary.t_typical_us, summary.p99_us);

  if (absl::Status status = (*client)->Close(env.DeadlineIn(seconds(5)));
      !status.ok()) {
    return Fail("closing", status);
  }
  if (absl::Status status = (*server)->Close(env.DeadlineIn(seconds(5)));
      !status.ok()) {
    return Fail("closing", status);
  }
  client->reset();
  server->reset();
  local_region->Release().IgnoreError();
  remote_region->Release().IgnoreError();
  client_context->reset();
  server_context->reset();
  const size_t leaks = fabric.LeakReport().size();
  std::printf(
      "closed         gracefully; verbs objects left behind: %zu\n\nOK\n",
      leaks);
  return leaks == 0 ? 0 : 1;
}

}  // namespace
}  // namespace rdma_transport

int main() { return rdma_transport::RunDemo(); }
