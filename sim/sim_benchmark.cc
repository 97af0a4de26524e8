// The cost of one simulated SEND round trip: post a receive on the responder,
// post a SEND on the requester, poll the requester's send completion and the
// responder's receive completion. This is the floor the transport's own
// benchmarks over the simulator are compared with.
//
//   bazel run -c opt //sim:sim_benchmark
//
// BM_SendRoundTrip reports the mean (Google Benchmark's time per iteration);
// BM_SendRoundTripLatency times every iteration and reports perftest's
// figures (t_min, t_typical = median, t_avg, p99, p99.9) as counters, in ns.
// BM_WriteStreamVirtualTime streams chains of 16 RDMA WRITEs and reports,
// side by side, the throughput in the fabric's virtual time and the link's
// rate (virtual_gbps, link_gbps), besides its own CPU cost per WRITE.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "sim/fabric.h"
#include "sim/sim_testing.h"
#include "sim/sim_verbs.h"

namespace rdma_transport::sim {
namespace {

// Two ConnectX-6 endpoints, connected, with room for inline SENDs.
class Pair {
 public:
  explicit Pair(ibv_mtu path_mtu = IBV_MTU_1024) : verbs_(&fabric_) {
    EndpointOptions options;
    options.cap.max_inline_data = 256;
    requester_ = Must(Endpoint::Create(
        &verbs_, Must(fabric_.AddDevice(ConnectX6())), options));
    responder_ = Must(Endpoint::Create(
        &verbs_, Must(fabric_.AddDevice(ConnectX6())), options));
    ConnectOptions connect;
    connect.path_mtu = path_mtu;
    Check(requester_->ConnectTo(*responder_, connect));
    Check(responder_->ConnectTo(*requester_, connect));
  }

  // A chain of `count` signalled WRITEs of `size` bytes, posted at once (in
  // kImmediate the post runs them all, pipelined), and their completions.
  bool WriteChain(benchmark::State& state, uint32_t size, int count) {
    ibv_sge sge{requester_->address(0), size, requester_->lkey()};
    std::vector<ibv_send_wr> wrs(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      ibv_send_wr& wr = wrs[static_cast<size_t>(i)];
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.rdma.remote_addr = responder_->address(0);
      wr.wr.rdma.rkey = responder_->rkey();
      wr.next = i + 1 < count ? &wrs[static_cast<size_t>(i) + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    if (!verbs_.PostSend(requester_->qp(), wrs.data(), &bad).ok()) {
      state.SkipWithError("PostSend failed");
      return false;
    }
    for (int i = 0; i < count; ++i) {
      if (!PollOne(state, requester_->send_cq())) return false;
    }
    return true;
  }

  Fabric& fabric() { return fabric_; }
  const std::string& device() const { return requester_->device(); }

  // One round trip; false (after reporting) on any failure.
  bool RoundTrip(benchmark::State& state, uint32_t size, bool inline_send) {
    recv_sge_ = {responder_->address(0), size, responder_->lkey()};
    recv_.sg_list = &recv_sge_;
    recv_.num_sge = 1;
    ibv_recv_wr* bad_recv = nullptr;
    if (!verbs_.PostRecv(responder_->qp(), &recv_, &bad_recv).ok()) {
      state.SkipWithError("PostRecv failed");
      return false;
    }
    send_sge_ = {requester_->address(0), size, requester_->lkey()};
    send_.sg_list = &send_sge_;
    send_.num_sge = 1;
    send_.opcode = IBV_WR_SEND;
    send_.send_flags = IBV_SEND_SIGNALED | (inline_send ? IBV_SEND_INLINE : 0);
    ibv_send_wr* bad_send = nullptr;
    if (!verbs_.PostSend(requester_->qp(), &send_, &bad_send).ok()) {
      state.SkipWithError("PostSend failed");
      return false;
    }
    return PollOne(state, requester_->send_cq()) &&
           PollOne(state, responder_->recv_cq());
  }

 private:
  template <typename T>
  static T Must(absl::StatusOr<T> value) {
    if (!value.ok()) {
      std::fprintf(stderr, "setup failed: %s\n",
                   value.status().ToString().c_str());
      std::abort();
    }
    return *std::move(value);
  }
  static void Check(const absl::Status& status) {
    if (!status.ok()) {
      std::fprintf(stderr, "setup failed: %s\n", status.ToString().c_str());
      std::abort();
    }
  }

  bool PollOne(benchmark::State& state, ibv_cq* cq) {
    absl::StatusOr<int> count = verbs_.PollCq(cq, 1, &wc_);
    if (!count.ok() || *count != 1 || wc_.status != IBV_WC_SUCCESS) {
      state.SkipWithError("completion missing or failed");
      return false;
    }
    return true;
  }

  Fabric fabric_;
  SimVerbs verbs_;
  std::unique_ptr<Endpoint> requester_;
  std::unique_ptr<Endpoint> responder_;
  ibv_sge recv_sge_{};
  ibv_recv_wr recv_{};
  ibv_sge send_sge_{};
  ibv_send_wr send_{};
  ibv_wc wc_{};
};

void BM_SendRoundTrip(benchmark::State& state) {
  const auto size = static_cast<uint32_t>(state.range(0));
  const bool inline_send = state.range(1) != 0;
  Pair pair;
  for (auto _ : state) {
    if (!pair.RoundTrip(state, size, inline_send)) break;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * size);
  state.SetLabel(inline_send ? "inline" : "gathered");
}

void BM_SendRoundTripLatency(benchmark::State& state) {
  const auto size = static_cast<uint32_t>(state.range(0));
  const bool inline_send = state.range(1) != 0;
  Pair pair;
  std::vector<double> samples;
  samples.reserve(1 << 20);
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    if (!pair.RoundTrip(state, size, inline_send)) break;
    const auto stop = std::chrono::steady_clock::now();
    if (samples.size() < samples.capacity()) {
      samples.push_back(
          std::chrono::duration<double, std::nano>(stop - start).count());
    }
  }
  if (samples.empty()) return;
  std::sort(samples.begin(), samples.end());
  auto percentile = [&samples](double p) {
    const size_t index = std::min(
        samples.size() - 1, static_cast<size_t>(p * (samples.size() - 1)));
    return samples[index];
  };
  double sum = 0;
  for (double sample : samples) sum += sample;
  state.counters["t_min_ns"] = samples.front();
  state.counters["t_typical_ns"] = percentile(0.5);
  state.counters["t_avg_ns"] = sum / static_cast<double>(samples.size());
  state.counters["t_p99_ns"] = percentile(0.99);
  state.counters["t_p999_ns"] = percentile(0.999);
  state.SetLabel(inline_send ? "inline" : "gathered");
}

void BM_WriteStreamVirtualTime(benchmark::State& state) {
  constexpr uint32_t kSize = 64 * 1024;
  constexpr int kChain = 16;
  Pair pair(IBV_MTU_4096);
  const auto start = pair.fabric().Now();
  for (auto _ : state) {
    if (!pair.WriteChain(state, kSize, kChain)) break;
  }
  const double ns = static_cast<double>((pair.fabric().Now() - start).count());
  const double bits =
      8.0 * kSize * kChain * static_cast<double>(state.iterations());
  state.counters["virtual_gbps"] = ns > 0 ? bits / ns : 0;
  state.counters["link_gbps"] =
      pair.fabric().LinkGbps(pair.device()).value_or(0);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kSize *
                          kChain);
}

// {message bytes, inline}. ConnectX-6 grants 316 inline bytes here, so 4096
// is gathered only.
void RoundTripArgs(benchmark::internal::Benchmark* benchmark) {
  for (int64_t size : {8, 64, 256}) {
    benchmark->Args({size, 0});
    benchmark->Args({size, 1});
  }
  benchmark->Args({4096, 0});
  benchmark->ArgNames({"bytes", "inline"});
}

BENCHMARK(BM_SendRoundTrip)->Apply(RoundTripArgs);
BENCHMARK(BM_SendRoundTripLatency)->Apply(RoundTripArgs);
BENCHMARK(BM_WriteStreamVirtualTime);

}  // namespace
}  // namespace rdma_transport::sim

BENCHMARK_MAIN();
