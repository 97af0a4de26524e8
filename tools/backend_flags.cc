#include "tools/backend_flags.h"

#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sim/fabric.h"
#include "sim/profile_names.h"
#include "sim/sim_verbs.h"
#include "verbs_shim/ibverbs_backend.h"

namespace rdma_transport {

FlagSet::FlagSet(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

void FlagSet::String(const std::string& name, std::string* value,
                     const std::string& help) {
  Flag flag;
  flag.name = name;
  flag.help = help;
  flag.default_text = *value;
  flag.assign = [value](const std::string& text) {
    *value = text;
    return absl::OkStatus();
  };
  flags_.push_back(std::move(flag));
}

void FlagSet::Int(const std::string& name, int64_t* value,
                  const std::string& help) {
  Flag flag;
  flag.name = name;
  flag.help = help;
  flag.default_text = absl::StrCat(*value);
  flag.assign = [name, value](const std::string& text) {
    int64_t parsed = 0;
    if (!absl::SimpleAtoi(text, &parsed)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, "=", text, ": not an integer"));
    }
    *value = parsed;
    return absl::OkStatus();
  };
  flags_.push_back(std::move(flag));
}

void FlagSet::Bool(const std::string& name, bool* value,
                   const std::string& help) {
  Flag flag;
  flag.name = name;
  flag.help = help;
  flag.default_text = *value ? "true" : "false";
  flag.is_bool = true;
  flag.assign = [name, value](const std::string& text) {
    if (text == "true" || text == "1" || text == "yes") {
      *value = true;
    } else if (text == "false" || text == "0" || text == "no") {
      *value = false;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, "=", text, ": want true or false"));
    }
    return absl::OkStatus();
  };
  flags_.push_back(std::move(flag));
}

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  for (Flag& flag : flags_) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

bool FlagSet::WasSet(const std::string& name) const {
  for (const Flag& flag : flags_) {
    if (flag.name == name) return flag.set;
  }
  return false;
}

absl::Status FlagSet::Parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      help_ = true;
      continue;
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument \"", arg, "\" (see --help)"));
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (size_t equals = name.find('='); equals != std::string::npos) {
      value = name.substr(equals + 1);
      name = name.substr(0, equals);
    }
    Flag* flag = Find(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!value.has_value()) {
      if (flag->is_bool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " needs a value"));
      }
    }
    if (absl::Status status = flag->assign(*value); !status.ok()) {
      return status;
    }
    flag->set = true;
  }
  return absl::OkStatus();
}

std::string FlagSet::Usage() const {
  std::string usage = absl::StrCat(program_, ": ", summary_, "\n\nflags:\n");
  for (const Flag& flag : flags_) {
    std::string left = absl::StrCat("  --", flag.name);
    if (!flag.is_bool) absl::StrAppend(&left, "=VALUE");
    if (left.size() < 24) left.resize(24, ' ');
    absl::StrAppend(&usage, left, " ", flag.help);
    if (!flag.default_text.empty() && flag.default_text != "false") {
      absl::StrAppend(&usage, " (default ", flag.default_text, ")");
    }
    absl::StrAppend(&usage, "\n");
  }
  return usage;
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

void BackendFlags::Register(FlagSet& flags) {
  flags.String("backend", &backend, "sim | ibverbs");
  flags.String("device", &device,
               "RDMA device of this side (default: the first one)");
  flags.String("peer-device", &peer_device,
               "--self only: the other end's device (default: the second)");
  flags.String("profile", &profile,
               absl::StrCat("sim NIC profile: ",
                            absl::StrJoin(sim::ProfileNames(), ", ")));
  flags.String("gid-index", &gid_index,
               "local GID index (default: MC_GID_INDEX, else the first "
               "RoCE v2 IPv4 GID)");
  flags.String("inline", &inline_mode,
               "auto: negotiate inline sends; off: max_inline=0");
  flags.String("tc", &tc,
               "traffic class 0..255 (default: MC_IB_TC, else the system's)");
  flags.String("progress", &progress,
               "busy: spin on the CQ; event: sleep on the completion channel");
}

absl::StatusOr<TransportConfig> BackendFlags::Resolve() const {
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
  TransportOptions options;
  absl::StatusOr<std::optional<int>> traffic_class = OptionalInt("tc", tc);
  if (!traffic_class.ok()) return traffic_class.status();
  options.traffic_class = *traffic_class;
  absl::StatusOr<std::optional<int>> gid = OptionalInt("gid-index", gid_index);
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
    const BackendFlags& flags, bool with_peer) {
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
    // runs on the wall clock here (sim/sim_env.h), the wire on the sim's.
    sim::FabricOptions fabric_options;
    fabric_options.clock = sim::ClockMode::kWallClock;
    backend->fabric_ = std::make_unique<sim::Fabric>(fabric_options);
    for (const char* address : {"10.0.0.1", "10.0.0.2"}) {
      absl::StatusOr<std::string> name =
          backend->fabric_->AddDevice(*profile, std::nullopt, address);
      if (!name.ok()) return name.status();
      devices.push_back(*name);
    }
    backend->verbs_ = std::make_unique<sim::SimVerbs>(backend->fabric_.get());
    backend->description_ =
        absl::StrCat("sim (", profile->model, ", profile ", flags.profile, ")");
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
        pick(flags.peer_device, 1, "peer-device");
    if (!peer_name.ok()) return peer_name.status();
    absl::StatusOr<std::unique_ptr<Context>> peer =
        Context::Open(*backend->verbs_, *peer_name, *config);
    if (!peer.ok()) return peer.status();
    backend->peer_ = *std::move(peer);
  }
  return backend;
}

}  // namespace rdma_transport
