// File: tools/backend_flags.h
//
// What the benchmark tools (rdma_pingpong, rdma_bw) share on the command
// line: parsing (absl/flags) and the flags that pick and open an RDMA
// backend, the simulator or libibverbs.
//
//   if (absl::Status parsed = ParseToolCommandLine(argc, argv, "summary");
//       !parsed.ok()) ...
//   const BackendFlags backend = BackendFlags::FromCommandLine();
//   absl::StatusOr<std::unique_ptr<BenchBackend>> opened =
//       BenchBackend::Open(backend, /*with_peer=*/true);
//   Context& mine = (*opened)->local();     // --device
//   Context* other = (*opened)->peer();     // --peer_device (--self only)
//
// Flags are absl flags: `--name=value` or `--name value`; a boolean flag is
// `--name` (or `--name=true|false`, `--noname`); `--help` lists them. An
// unknown flag or a value of the wrong type ends the program in
// ParseCommandLine with a message naming the flag; values of the right type
// but out of range are refused by the tool (Resolve(), Mode() and the tools'
// own checks), also naming the flag: a benchmark must never run with a
// setting it was not asked for.
//
// The simulator lives in one process, so on `--backend=sim` both ends are
// in this process: BenchBackend puts two NICs of `--profile` on one fabric
// (10.0.0.1 and 10.0.0.2) and opens both. On `--backend=ibverbs` it opens
// `--device` (default: the first device listed) and, with a peer,
// `--peer_device` (default: the second).
//
// Ownership: a BenchBackend owns the fabric (sim), the Verbs backend and the
// Contexts; every Connection made on them must be destroyed first.
// Thread-compatible; the Contexts it hands out are thread-safe.

#ifndef RDMA_TRANSPORT_TOOLS_BACKEND_FLAGS_H_
#define RDMA_TRANSPORT_TOOLS_BACKEND_FLAGS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/config.h"
#include "transport/connection.h"
#include "transport/context.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport {

namespace sim {
class Fabric;
}  // namespace sim

// Parses the command line into the program's absl flags; `summary` heads
// --help. kInvalidArgument for a positional argument (the flags take none).
// Unknown flags and values of the wrong type exit the process in
// absl::ParseCommandLine, with a message naming the flag.
absl::Status ParseToolCommandLine(int argc, char** argv,
                                  const std::string& summary);

// True when --`name` was given on the command line (after
// ParseToolCommandLine): a default left alone, told from the same value
// chosen.
bool FlagOnCommandLine(const std::string& name);

// "8,64,4096" -> {8, 64, 4096}; each in [min, max], in any order,
// duplicates allowed. kInvalidArgument otherwise.
absl::StatusOr<std::vector<uint32_t>> ParseSizeList(const std::string& text,
                                                    uint32_t min, uint32_t max);

struct BackendFlags {
  std::string backend = "sim";       // sim | ibverbs
  std::string device;                // default: sim's first NIC / first listed
  std::string peer_device;           // --self only; default: the second
  std::string profile = "cx7";       // sim only, sim/profile_names.h
  std::string gid_index;             // empty: MC_GID_INDEX, else automatic
  std::string inline_mode = "auto";  // auto | off (max_inline = 0)
  std::string tc;                    // empty: MC_IB_TC applies
  std::string progress = "busy";     // busy | event
  std::string thread_mode = "shared";  // shared | serialized
  bool busy_poll_yields = true;        // ConnectionOptions::busy_poll_yields

  // The values of --backend, --device, --peer_device, --profile,
  // --gid_index, --inline, --tc, --progress, --thread_mode and
  // --busy_poll_yields (after ParseToolCommandLine).
  static BackendFlags FromCommandLine();
  // kInvalidArgument naming the flag when --backend, --inline, --progress
  // or --thread_mode is not one of its words.
  absl::Status Check() const;
  // Checks the values; resolves them into the transport's configuration.
  absl::StatusOr<TransportConfig> Resolve() const;
  ProgressMode progress_mode() const {
    return progress == "event" ? ProgressMode::kEvent : ProgressMode::kBusyPoll;
  }
  ThreadMode connection_thread_mode() const {
    return thread_mode == "serialized" ? ThreadMode::kSerialized
                                       : ThreadMode::kShared;
  }
  bool is_sim() const { return backend == "sim"; }
};

// The clock a simulated backend's transport runs on (sim/sim_env.h):
// kWallClock, as the tools measure real time with threads of their own; or
// kVirtual, the fabric's virtual clock with the fabric in kManual (posts
// queue work, packets move while every thread waits), so that a tool
// measures what the simulated wire does (rdma_bw --virtual_time). Ignored
// on ibverbs.
enum class SimClock { kWallClock, kVirtual };

class BenchBackend {
 public:
  // Opens `flags.device` and, when `with_peer`, `flags.peer_device` too.
  static absl::StatusOr<std::unique_ptr<BenchBackend>> Open(
      const BackendFlags& flags, bool with_peer,
      SimClock sim_clock = SimClock::kWallClock);
  ~BenchBackend();

  Verbs& verbs() { return *verbs_; }
  Context& local() { return *local_; }
  Context* peer() { return peer_.get(); }  // null without a peer
  const TransportConfig& config() const { return config_; }
  sim::Fabric* fabric() { return fabric_.get(); }  // null on ibverbs
  // "sim (ConnectX-7, profile cx7)" or "ibverbs".
  const std::string& description() const { return description_; }

 private:
  BenchBackend() = default;

  std::unique_ptr<sim::Fabric> fabric_;
  std::unique_ptr<Verbs> verbs_;
  TransportConfig config_;
  std::unique_ptr<Context> local_;
  std::unique_ptr<Context> peer_;
  std::string description_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TOOLS_BACKEND_FLAGS_H_
