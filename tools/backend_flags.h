// File: tools/backend_flags.h
//
// What the benchmark tools (rdma_pingpong, rdma_bw) share on the command
// line: a small flag parser, and the flags that pick and open an RDMA
// backend, the simulator or libibverbs.
//
//   FlagSet flags("rdma_pingpong", "one-way latency per message size");
//   BackendFlags backend;
//   backend.Register(flags);
//   if (absl::Status parsed = flags.Parse(argc, argv); !parsed.ok()) ...
//   absl::StatusOr<std::unique_ptr<BenchBackend>> opened =
//       BenchBackend::Open(backend, /*with_peer=*/true);
//   Context& mine = (*opened)->local();     // --device
//   Context* other = (*opened)->peer();     // --peer-device (--self only)
//
// Flags are `--name=value` or `--name value`; a boolean flag is `--name`
// (or `--name=true|false`). Unknown flags and malformed values are errors
// that name the flag: a benchmark must never run with a setting it was not
// asked for.
//
// The simulator lives in one process, so on `--backend=sim` both ends are
// in this process: BenchBackend puts two NICs of `--profile` on one fabric
// (10.0.0.1 and 10.0.0.2) and opens both. On `--backend=ibverbs` it opens
// `--device` (default: the first device listed) and, with a peer,
// `--peer-device` (default: the second).
//
// Ownership: a BenchBackend owns the fabric (sim), the Verbs backend and the
// Contexts; every Connection made on them must be destroyed first.
// Thread-compatible; the Contexts it hands out are thread-safe.

#ifndef RDMA_TRANSPORT_TOOLS_BACKEND_FLAGS_H_
#define RDMA_TRANSPORT_TOOLS_BACKEND_FLAGS_H_

#include <cstdint>
#include <functional>
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

// A minimal command-line parser for the tools.
class FlagSet {
 public:
  FlagSet(std::string program, std::string summary);

  void String(const std::string& name, std::string* value,
              const std::string& help);
  void Int(const std::string& name, int64_t* value, const std::string& help);
  void Bool(const std::string& name, bool* value, const std::string& help);

  // kInvalidArgument naming the flag for an unknown flag, a missing or
  // malformed value, or a positional argument. `--help` sets help_requested().
  absl::Status Parse(int argc, char** argv);
  bool help_requested() const { return help_; }
  bool WasSet(const std::string& name) const;
  std::string Usage() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string default_text;
    bool is_bool = false;
    bool set = false;
    std::function<absl::Status(const std::string&)> assign;
  };
  Flag* Find(const std::string& name);

  std::string program_;
  std::string summary_;
  std::vector<Flag> flags_;
  bool help_ = false;
};

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

  void Register(FlagSet& flags);
  // Checks the values; resolves them into the transport's configuration.
  absl::StatusOr<TransportConfig> Resolve() const;
  ProgressMode progress_mode() const {
    return progress == "event" ? ProgressMode::kEvent : ProgressMode::kBusyPoll;
  }
  bool is_sim() const { return backend == "sim"; }
};

class BenchBackend {
 public:
  // Opens `flags.device` and, when `with_peer`, `flags.peer_device` too.
  static absl::StatusOr<std::unique_ptr<BenchBackend>> Open(
      const BackendFlags& flags, bool with_peer);
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
