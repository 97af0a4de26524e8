#include "tools/backend_flags.h"

#include <cerrno>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sim/fabric.h"
#include "sim/profile_names.h"
#include "sim/sim_verbs.h"
#include "verbs_shim/ibverbs_backend.h"

// Defaults are BackendFlags' own (backend_flags.h).
ABSL_FLAG(std::string, backend, rdma_transport::BackendFlags{}.backend,
          "sim | ibverbs");
ABSL_FLAG(std::string, device, "",
          "RDMA device of this side (default: the first one)");
ABSL_FLAG(std::string, peer_device, "",
          "--self only: the other end's device (default: the second)");
ABSL_FLAG(std::string, profile, rdma_transport::BackendFlags{}.profile,
          "sim NIC profile (sim/profile_names.h; an unknown name is "
          "refused with the list)");
ABSL_FLAG(std::string, gid_index, "",
          "local GID index (default: MC_GID_INDEX, else the first RoCE v2 "
          "IPv4 GID)");
ABSL_FLAG(std::string, inline, rdma_transport::BackendFlags{}.inline_mode,
          "auto: negotiate inline sends; off: max_inline=0");
ABSL_FLAG(std::string, tc, "",
          "traffic class 0..255 (default: MC_IB_TC, else the system's)");
ABSL_FLAG(std::string, progress, rdma_transport::BackendFlags{}.progress,
          "busy: spin on the CQ; event: sleep on the completion channel");
ABSL_FLAG(bool, busy_poll_yields,
          rdma_transport::BackendFlags{}.busy_poll_yields,
          "--progress=busy: yield the CPU in long waits after the thread "
          "was descheduled (ConnectionOptions::busy_poll_yields); false: "
          "never, as perftest");
ABSL_FLAG(std::string, thread_mode, rdma_transport::BackendFlags{}.thread_mode,
          "shared: a connection's lock is atomic; serialized: each "
          "connection is used by one thread at a time, no atomic lock "
          "(ThreadMode::kSerialized)");

namespace rdma_transport {

namespace {

// The names of the flags in argv (FlagOnCommandLine). absl_flags_reflection
// could say so, but Debian 12's Abseil keeps IsSpecifiedOnCommandLine()
// private.
std::set<std::string>& FlagsOnCommandLine() {
  static std::set<std::string>* names = new std::set<std::string>;
  return *names;
}

}  // namespace

absl::Status ParseToolCommandLine(int argc, char** argv,
                                  const std::string& summary) {
  // "-name", "--name", "--name=value" ("--name value" too: its value is no
  // flag); flags end at "--".
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "-")) continue;
    absl::ConsumePrefix(&arg, "-");
    FlagsOnCommandLine().insert(std::string(arg.substr(0, arg.find('='))));
  }
  // --help lists every flag of the tool (absl's default is only those
  // defined in a file named after the program).
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "tools/");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(summary);
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument \"", rest[1],
                     "\" (the flags take no "
                     "positional arguments; see --help)"));
  }
  return absl::OkStatus();
}

bool FlagOnCommandLine(const std::string& name) {
  return FlagsOnCommandLine().contains(name);
}

absl::StatusOr<std::vector<uint32_t>> ParseSizeList(const std::string& text,
                                                    uint32_t min,
                                                    uint32_t max) {
  std::vector<uint32_t> sizes;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    uint32_t size = 0;
    if (!absl::SimpleAtoi(piece, &size) || size < min || size > max) {
      return absl::InvalidArgumentError(
          absl::StrCat("message size \"", std::string(piece), "\" in \"", text,
                       "\" is not an integer in ", min, "..", max));
    }
    sizes.push_back(size);
  }
  return sizes;
}

namespace {

// An optional integer flag: empty means unset.
absl::StatusOr<std::optional<int>> OptionalInt(const std::string& name,
                                               const std::string& text) {
  if (text.empty()) return std::optional<int>();
  int value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "=", text, ": not an integer"));
  }
  return std::optional<int>(value);
}

}  // namespace

BackendFlags BackendFlags::FromCommandLine() {
  BackendFlags flags;
  flags.backend = absl::GetFlag(FLAGS_backend);
  flags.device = absl::GetFlag(FLAGS_device);
  flags.peer_device = absl::GetFlag(FLAGS_peer_device);
  flags.profile = absl::GetFlag(FLAGS_profile);
  flags.gid_index = absl::GetFlag(FLAGS_gid_index);
  flags.inline_mode = absl::GetFlag(FLAGS_inline);
  flags.tc = absl::GetFlag(FLAGS_tc);
  flags.progress = absl::GetFlag(FLAGS_progress);
  flags.thread_mode = absl::GetFlag(FLAGS_thread_mode);
  flags.busy_poll_yields = absl::GetFlag(FLAGS_busy_poll_yields);
  return flags;
}

absl::Status BackendFlags::Check() const {
  if (backend != "sim" && backend != "ibverbs") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend=", backend, ": want sim or ibverbs"));
  }
  if (inline_mode != "auto" && inline_mode != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("--inline=", inline_mode, ": want auto or off"));
  }
  if (progress != "busy" && progress != "event") {
    return absl::InvalidArgumentError(
        absl::StrCat("--progress=", progress, ": want busy or event"));
  }
  if (thread_mode != "shared" && thread_mode != "serialized") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--thread_mode=", thread_mode, ": want shared or serialized"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TransportConfig> BackendFlags::Resolve() const {
  if (absl::Status status = Check(); !status.ok()) return status;
  TransportOptions options;
  absl::StatusOr<std::optional<int>> traffic_class = OptionalInt("tc", tc);
  if (!traffic_class.ok()) return traffic_class.status();
  options.traffic_class = *traffic_class;
  absl::StatusOr<std::optional<int>> gid = OptionalInt("gid_index", gid_index);
  if (!gid.ok()) return gid.status();
  options.gid_index = *gid;
  if (inline_mode == "off") options.max_inline = 0;
  return LoadTransportConfig(options);
}

BenchBackend::~BenchBackend() {
  // Contexts before the backend, the backend before the fabric.
  peer_.reset();
  local_.reset();
  verbs_.reset();
  fabric_.reset();
}

absl::StatusOr<std::unique_ptr<BenchBackend>> BenchBackend::Open(
    const BackendFlags& flags, bool with_peer, SimClock sim_clock) {
  absl::StatusOr<TransportConfig> config = flags.Resolve();
  if (!config.ok()) return config.status();
  std::unique_ptr<BenchBackend> backend(new BenchBackend());
  backend->config_ = *config;

  std::vector<std::string> devices;
  if (flags.is_sim()) {
    absl::StatusOr<sim::DeviceProfile> profile =
        sim::ProfileByName(flags.profile);
    if (!profile.ok()) return profile.status();
    // The tools measure real time with threads of their own: the transport
    // runs on the wall clock here (sim/sim_env.h), the wire on the sim's;
    // or all of it on the virtual clock (SimClock::kVirtual).
    sim::FabricOptions fabric_options;
    if (sim_clock == SimClock::kVirtual) {
      fabric_options.clock = sim::ClockMode::kVirtual;
      fabric_options.progress_mode = sim::ProgressMode::kManual;
    } else {
      fabric_options.clock = sim::ClockMode::kWallClock;
    }
    backend->fabric_ = std::make_unique<sim::Fabric>(fabric_options);
    for (const char* address : {"10.0.0.1", "10.0.0.2"}) {
      absl::StatusOr<std::string> name =
          backend->fabric_->AddDevice(*profile, std::nullopt, address);
      if (!name.ok()) return name.status();
      devices.push_back(*name);
    }
    backend->verbs_ = std::make_unique<sim::SimVerbs>(backend->fabric_.get());
    backend->description_ = absl::StrCat(
        "sim (", profile->model, ", profile ", flags.profile,
        sim_clock == SimClock::kVirtual ? ", virtual time" : "", ")");
  } else {
    backend->verbs_ = std::make_unique<IbverbsBackend>();
    absl::StatusOr<std::vector<std::string>> listed =
        backend->verbs_->ListDevices();
    if (!listed.ok()) return listed.status();
    devices = *listed;
    backend->description_ = "ibverbs";
  }

  auto pick = [&](const std::string& wanted, size_t fallback,
                  const char* flag) -> absl::StatusOr<std::string> {
    if (!wanted.empty()) {
      for (const std::string& device : devices) {
        if (device == wanted) return wanted;
      }
      return absl::NotFoundError(absl::StrCat(
          "--", flag, "=", wanted, ": no such RDMA device (present: [",
          absl::StrJoin(devices, ", "), "])"));
    }
    if (fallback < devices.size()) return devices[fallback];
    return absl::NotFoundError(absl::StrCat(
        "--", flag, ": ", devices.size(),
        " RDMA device(s) present, need at least ", fallback + 1,
        devices.empty() ? " (is an RDMA driver loaded? try rdma_devices)"
                        : ""));
  };
  absl::StatusOr<std::string> local_name = pick(flags.device, 0, "device");
  if (!local_name.ok()) return local_name.status();
  absl::StatusOr<std::unique_ptr<Context>> local =
      Context::Open(*backend->verbs_, *local_name, *config);
  if (!local.ok()) return local.status();
  backend->local_ = *std::move(local);
  if (with_peer) {
    absl::StatusOr<std::string> peer_name =
        pick(flags.peer_device, 1, "peer_device");
    if (!peer_name.ok()) return peer_name.status();
    absl::StatusOr<std::unique_ptr<Context>> peer =
        Context::Open(*backend->verbs_, *peer_name, *config);
    if (!peer.ok()) return peer.status();
    backend->peer_ = *std::move(peer);
  }
  return backend;
}

}  // namespace rdma_transport
