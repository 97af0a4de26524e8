// File: sim/traffic_mix.h
//
// `TrafficMix` drives traffic that contends for a simulated fabric: streams
// of RDMA WRITEs that keep their send queues full, and at most one SEND
// ping-pong that measures its one-way latency (round trip / 2, as perftest's
// ib_send_lat) in virtual time. With the fabric's switch (sim/switch.h) the
// streams and the ping-pong can be given traffic classes that map to
// different queues, to see what priorities do to the ping-pong's tail.
//
//   Fabric fabric({.progress_mode = ProgressMode::kManual});
//   SimVerbs verbs(&fabric);
//   TrafficMix mix(&fabric, &verbs);
//   ASSERT_TRUE(mix.AddWriteStream(bulk_host, server, FlowOptions{}).ok());
//   ASSERT_TRUE(mix.AddPingPong(client, server,
//                               {.traffic_class = 104, .message_bytes = 8})
//                   .ok());
//   ASSERT_TRUE(mix.Run([&] { return mix.pings() >= 1000; }).ok());
//   std::vector<double> one_way_us = mix.ping_one_way_us();
//
// Test and tool scaffolding (testonly). Thread-compatible: one thread drives
// the fabric, which must be in ProgressMode::kManual and outlive the mix.
// Errors: absl::Status from the verbs calls and from a completion that is
// not IBV_WC_SUCCESS (kInternal naming it).

#ifndef RDMA_TRANSPORT_SIM_TRAFFIC_MIX_H_
#define RDMA_TRANSPORT_SIM_TRAFFIC_MIX_H_

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sim/fabric.h"
#include "sim/sim_testing.h"
#include "sim/sim_verbs.h"

namespace rdma_transport::sim {

struct FlowOptions {
  uint8_t traffic_class = 0;
  uint32_t message_bytes = 64 * 1024;  // A ping-pong's: its message size.
  int depth = 4;                       // WRITEs outstanding (streams only).
  int messages = 0;  // Streams: WRITEs in all; 0: as many as Run() lasts.
  ibv_mtu path_mtu = IBV_MTU_4096;
};

class TrafficMix {
 public:
  // `fabric` is the one `verbs` drives (not owned).
  TrafficMix(Fabric* fabric, SimVerbs* verbs)
      : fabric_(fabric), verbs_(verbs) {}
  ~TrafficMix();
  TrafficMix(const TrafficMix&) = delete;
  TrafficMix& operator=(const TrafficMix&) = delete;

  // A stream of WRITEs from device `from` to device `to`; its index.
  absl::StatusOr<int> AddWriteStream(const std::string& from,
                                     const std::string& to,
                                     const FlowOptions& options);
  // The ping-pong: `client` sends, `server` echoes (inline when it fits).
  // kAlreadyExists for a second one.
  absl::Status AddPingPong(const std::string& client, const std::string& server,
                           const FlowOptions& options);

  // Steps the fabric until `done()` holds, keeping every stream's queue full
  // and the ping-pong going. kDeadlineExceeded if the fabric goes idle first.
  absl::Status Run(const std::function<bool()>& done);

  int completed(int stream) const { return streams_[stream]->completed; }
  uint64_t bytes_written(int stream) const;
  // Round trips completed, and their one-way latencies in microseconds.
  int pings() const { return static_cast<int>(one_way_us_.size()); }
  const std::vector<double>& ping_one_way_us() const { return one_way_us_; }

  // Closes every endpoint; the first failure is returned.
  absl::Status Close();

 private:
  struct Stream {
    std::unique_ptr<Endpoint> requester;
    std::unique_ptr<Endpoint> responder;
    FlowOptions options;
    int posted = 0;
    int completed = 0;
    bool MayPost() const {
      return options.messages == 0 || posted < options.messages;
    }
  };
  struct PingPong {
    std::unique_ptr<Endpoint> client;
    std::unique_ptr<Endpoint> server;
    FlowOptions options;
    unsigned int flags = IBV_SEND_SIGNALED;
    bool started = false;
    std::chrono::nanoseconds sent{0};
  };

  absl::Status PostWrite(Stream& stream);
  absl::Status Ping();
  // Polls every CQ once and reacts: a stream reposts, the ping-pong echoes
  // or takes its sample and pings again.
  absl::Status PollAll();

  Fabric* const fabric_;
  SimVerbs* const verbs_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::unique_ptr<PingPong> ping_;
  std::vector<double> one_way_us_;
};

}  // namespace rdma_transport::sim

#endif  // RDMA_TRANSPORT_SIM_TRAFFIC_MIX_H_
