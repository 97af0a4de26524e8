#include "tools/bench_common.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <thread>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "transport/handshake.h"
#include "transport/listener.h"
#include "verbs_shim/env_thread.h"

// Defaults are SessionFlags' own (bench_common.h).
ABSL_FLAG(bool, server, false,
          "serve one client on --listen, then exit (perftest style)");
ABSL_FLAG(std::string, listen, rdma_transport::SessionFlags{}.listen,
          "server: TCP address of the handshake");
ABSL_FLAG(std::string, connect, "",
          "client: the server's handshake address, host:port");
ABSL_FLAG(bool, self, false,
          "both ends in this process (sim: two NICs on one fabric; ibverbs: "
          "--device and --peer_device)");
ABSL_FLAG(int64_t, timeout, rdma_transport::SessionFlags{}.timeout_s,
          "seconds without progress before the run fails");
ABSL_FLAG(std::string, token, "",
          "shared secret, the same on both sides: the server rejects clients "
          "without it (default: none, and the server says so)");
ABSL_FLAG(std::string, csv, "", "write the results to this CSV file");
ABSL_FLAG(std::string, json, "", "write the results to this JSON file");
ABSL_FLAG(bool, zero_copy, false,
          "messages with no copy: SendFrom() a registered region, "
          "ReceiveBorrowed() the receive slot (or ReceiveInto() a registered "
          "region above the slot); the server follows the client");
ABSL_FLAG(int64_t, slot_bytes, 0,
          "receive slot (max_message_size) in bytes, 512..16777216; larger "
          "messages go by rendezvous. 0: the largest of --sizes, within "
          "512..65536");

namespace rdma_transport {
namespace {

constexpr char kPlanMagic[] = "RDTPBENCH/1";

absl::StatusOr<std::unique_ptr<Connection>> Dial(
    Context& context, const std::string& address,
    const ConnectionOptions& options, Deadline deadline) {
  // The server may still be starting: retry a refused connection.
  while (true) {
    absl::StatusOr<std::unique_ptr<Connection>> connection =
        Connect(context, address, options);
    if (connection.ok() || !absl::IsUnavailable(connection.status()) ||
        Clock::now() + std::chrono::milliseconds(100) >= deadline) {
      return connection;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

int Failed(const std::string& program, const std::string& what,
           const absl::Status& status) {
  std::fprintf(stderr, "%s: error: %s: %s\n", program.c_str(), what.c_str(),
               status.ToString().c_str());
  return 1;
}

}  // namespace

SessionFlags SessionFlags::FromCommandLine() {
  SessionFlags session;
  session.server = absl::GetFlag(FLAGS_server);
  session.listen = absl::GetFlag(FLAGS_listen);
  session.connect = absl::GetFlag(FLAGS_connect);
  session.self = absl::GetFlag(FLAGS_self);
  session.timeout_s = absl::GetFlag(FLAGS_timeout);
  session.token = absl::GetFlag(FLAGS_token);
  session.csv = absl::GetFlag(FLAGS_csv);
  session.json = absl::GetFlag(FLAGS_json);
  return session;
}

absl::StatusOr<BenchMode> SessionFlags::Mode(
    const BackendFlags& backend) const {
  if (absl::Status status = backend.Check(); !status.ok()) return status;
  const int chosen =
      (server ? 1 : 0) + (self ? 1 : 0) + (connect.empty() ? 0 : 1);
  if (chosen > 1) {
    return absl::InvalidArgumentError(
        "choose one of --server, --connect=HOST:PORT and --self");
  }
  if (timeout_s <= 0) {
    return absl::InvalidArgumentError("--timeout must be positive");
  }
  if (chosen == 0 && !backend.is_sim()) {
    return absl::InvalidArgumentError(
        "on --backend=ibverbs choose --server, --connect=HOST:PORT or --self");
  }
  if (backend.is_sim() && (server || !connect.empty())) {
    return absl::InvalidArgumentError(
        "a simulated fabric lives in one process: --backend=sim runs both "
        "ends with --self");
  }
  if (server) return BenchMode::kServer;
  if (!connect.empty()) return BenchMode::kClient;
  return BenchMode::kSelf;
}

MessageFlags MessageFlags::FromCommandLine() {
  MessageFlags flags;
  flags.zero_copy = absl::GetFlag(FLAGS_zero_copy);
  flags.slot_bytes = absl::GetFlag(FLAGS_slot_bytes);
  return flags;
}

absl::Status MessageFlags::Check() const {
  if (slot_bytes != 0 &&
      (slot_bytes < kControlMessageSize || slot_bytes > kMaxSlotSize)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--slot_bytes=", slot_bytes, ": want 0 (auto) or ",
                     kControlMessageSize, "..", kMaxSlotSize));
  }
  return absl::OkStatus();
}

uint32_t MessageFlags::Slot(uint32_t largest) const {
  if (slot_bytes != 0) return static_cast<uint32_t>(slot_bytes);
  return std::clamp(largest, kControlMessageSize, kAutoSlotCap);
}

uint64_t CountFor(uint64_t base, bool scale, uint32_t size, uint64_t floor) {
  if (!scale || size <= kScaleCountsAbove) return base;
  return std::max(floor, base * kScaleCountsAbove / size);
}

namespace {

// `size` bytes of `memory`, registered into `region` with `access` when
// zero copy is on.
absl::Status MakeMessageMemory(Connection& connection, bool zero_copy,
                               size_t size, int access,
                               std::vector<std::byte>& memory,
                               MemoryRegion& region) {
  memory.resize(size);
  if (!zero_copy) return absl::OkStatus();
  absl::StatusOr<MemoryRegion> registered =
      connection.context().RegisterMemory(memory, access);
  if (!registered.ok()) return registered.status();
  region = *std::move(registered);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MessageSender> MessageSender::Create(Connection& connection,
                                                    bool zero_copy,
                                                    size_t largest) {
  MessageSender sender;
  sender.connection_ = &connection;
  sender.zero_copy_ = zero_copy;
  // kRemoteRead: a message above the slot goes by rendezvous, the peer
  // READing it from here.
  if (absl::Status status =
          MakeMessageMemory(connection, zero_copy, largest, kRemoteRead,
                            sender.memory_, sender.region_);
      !status.ok()) {
    return status;
  }
  return sender;
}

absl::Status MessageSender::Send(size_t size, Deadline deadline) {
  if (zero_copy_) return connection_->SendFrom(region_, 0, size, deadline);
  return connection_->Send(message(size), deadline);
}

absl::StatusOr<MessageReceiver> MessageReceiver::Create(Connection& connection,
                                                        bool zero_copy,
                                                        size_t largest) {
  MessageReceiver receiver;
  receiver.connection_ = &connection;
  receiver.zero_copy_ = zero_copy;
  if (absl::Status status = MakeMessageMemory(
          connection, zero_copy, std::max<size_t>(largest, kControlMessageSize),
          kLocalWrite, receiver.memory_, receiver.region_);
      !status.ok()) {
    return status;
  }
  return receiver;
}

absl::StatusOr<std::span<const std::byte>> MessageReceiver::Receive(
    size_t expected, Deadline deadline) {
  if (zero_copy_ && expected <= connection_->max_message_size()) {
    // The last view's slot goes back in the same call.
    if (absl::Status status = connection_->ReceiveBorrowed(&view_, deadline);
        !status.ok()) {
      return status;
    }
    return view_.data();
  }
  view_.Release();
  absl::StatusOr<size_t> n =
      zero_copy_
          ? connection_->ReceiveInto(region_, 0, memory_.size(), deadline)
          : connection_->Receive(memory_, deadline);
  if (!n.ok()) return n.status();
  return std::span<const std::byte>(memory_.data(), *n);
}

const char* PathName(uint64_t rendezvous, uint64_t total) {
  if (rendezvous == 0) return "eager";
  return rendezvous >= total ? "rndv" : "mixed";
}

double CycleClock::MicrosecondsPerTick() {
  static const double us_per_tick = [] {
#if defined(__x86_64__) || defined(__i386__)
    const Clock::time_point t0 = Clock::now();
    const uint64_t c0 = Now();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const uint64_t c1 = Now();
    const Clock::time_point t1 = Clock::now();
    return std::chrono::duration<double, std::micro>(t1 - t0).count() /
           static_cast<double>(c1 - c0);
#else
    return 1e-3;
#endif
  }();
  return us_per_tick;
}

int RunBench(const std::string& program, BenchMode mode, BenchBackend& backend,
             const SessionFlags& session,
             const ConnectionOptions& connection_options,
             const BenchRoles& roles) {
  // The backend's clock: the wall clock, or a simulated fabric's virtual
  // one (threads taking part through RunInThread).
  Env& env = backend.local().env();
  const Deadline setup_deadline = env.DeadlineIn(session.timeout());
  ConnectionOptions options = connection_options;
  options.token = session.token;
  ConnectionOptions client_options = options;
  client_options.engine = roles.client_engine;
  switch (mode) {
    case BenchMode::kServer: {
      // Like perftest, the tools serve without authentication unless given
      // a token; they say so.
      ListenerOptions listener_options;
      listener_options.allow_unauthenticated = true;
      absl::StatusOr<std::unique_ptr<Listener>> listener = Listener::Create(
          backend.local(), session.listen, options, listener_options);
      if (!listener.ok())
        return Failed(program, "listening", listener.status());
      std::printf("waiting for a client on %s (device %s)%s\n",
                  (*listener)->address().c_str(),
                  backend.local().device_name().c_str(),
                  session.token.empty()
                      ? "; no --token: any host that reaches it may connect"
                      : "");
      std::fflush(stdout);
      absl::StatusOr<std::unique_ptr<Connection>> connection =
          (*listener)->Accept(kNoDeadline);
      if (!connection.ok()) {
        return Failed(program, "accepting", connection.status());
      }
      absl::Status served = roles.server(**connection);
      if (!served.ok()) return Failed(program, "server", served);
      return 0;
    }
    case BenchMode::kClient: {
      absl::StatusOr<std::unique_ptr<Connection>> connection = Dial(
          backend.local(), session.connect, client_options, setup_deadline);
      if (!connection.ok()) {
        return Failed(program, absl::StrCat("connecting to ", session.connect),
                      connection.status());
      }
      absl::Status measured = roles.client(**connection);
      if (!measured.ok()) return Failed(program, "client", measured);
      return 0;
    }
    case BenchMode::kSelf:
      break;
  }

  Context* peer = backend.peer();
  if (peer == nullptr) {
    return Failed(program, "--self", absl::FailedPreconditionError("no peer"));
  }
  absl::StatusOr<std::unique_ptr<Listener>> listener =
      Listener::Create(*peer, "127.0.0.1:0", options);
  if (!listener.ok()) return Failed(program, "listening", listener.status());
  EnvFuture<absl::StatusOr<std::unique_ptr<Connection>>> dial =
      RunInThread(env, [&] {
        return Connect(backend.local(), (*listener)->address(), client_options);
      });
  absl::StatusOr<std::unique_ptr<Connection>> server =
      (*listener)->Accept(setup_deadline);
  absl::StatusOr<std::unique_ptr<Connection>> client = dial.Get();
  if (!client.ok()) return Failed(program, "connecting", client.status());
  if (!server.ok()) return Failed(program, "accepting", server.status());

  EnvFuture<absl::Status> serving =
      RunInThread(env, [&] { return roles.server(**server); });
  absl::Status measured = roles.client(**client);
  if (!measured.ok()) {
    // Unblock a server still waiting for the client.
    (void)(*client)->Close(env.DeadlineIn(std::chrono::seconds(1)));
  }
  const absl::Status served = serving.Get();
  int status = 0;
  if (!measured.ok()) status = Failed(program, "client", measured);
  if (!served.ok()) status = Failed(program, "server", served);
  return status;
}

absl::Status SendText(Connection& connection, const std::string& text,
                      Deadline deadline) {
  return connection.Send(
      std::span<const std::byte>(
          reinterpret_cast<const std::byte*>(text.data()), text.size()),
      deadline);
}

absl::StatusOr<std::string> ReceiveText(Connection& connection,
                                        std::span<std::byte> scratch,
                                        Deadline deadline) {
  absl::StatusOr<size_t> n = connection.Receive(scratch, deadline);
  if (!n.ok()) return n.status();
  return std::string(reinterpret_cast<const char*>(scratch.data()), *n);
}

std::string Plan::Encode() const {
  std::string text = absl::StrCat(kPlanMagic, " ", test);
  for (const auto& [key, value] : values) {
    absl::StrAppend(&text, " ", key, "=", value);
  }
  return text;
}

absl::StatusOr<Plan> Plan::Decode(const std::string& text) {
  std::vector<std::string> words = absl::StrSplit(text, ' ', absl::SkipEmpty());
  if (words.size() < 2 || words[0] != kPlanMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a test plan (want \"", kPlanMagic,
                     " <test> ...\"): \"", text.substr(0, 80), "\""));
  }
  Plan plan;
  plan.test = words[1];
  for (size_t i = 2; i < words.size(); ++i) {
    const size_t equals = words[i].find('=');
    if (equals == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("test plan: \"", words[i], "\" is not key=value"));
    }
    plan.values[words[i].substr(0, equals)] = words[i].substr(equals + 1);
  }
  return plan;
}

absl::StatusOr<int64_t> Plan::Int(const std::string& key) const {
  auto it = values.find(key);
  int64_t value = 0;
  if (it == values.end() || !absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("test plan: no integer ", key));
  }
  return value;
}

absl::StatusOr<std::vector<uint32_t>> Plan::Sizes(
    const std::string& key) const {
  auto it = values.find(key);
  if (it == values.end()) {
    return absl::InvalidArgumentError(absl::StrCat("test plan: no ", key));
  }
  return ParseSizeList(it->second, 1, kMaxBenchMessageSize);
}

absl::Status ServerFinish(Connection& connection, std::span<std::byte> scratch,
                          Deadline deadline) {
  absl::StatusOr<std::string> done = ReceiveText(connection, scratch, deadline);
  if (!done.ok()) return done.status();
  if (*done != "DONE") {
    return absl::DataLossError(
        absl::StrCat("expected DONE, got \"", done->substr(0, 80), "\""));
  }
  if (absl::Status status = SendText(connection, "DONE", deadline);
      !status.ok()) {
    return status;
  }
  // The client closes next; its close ends this Receive with kUnavailable.
  absl::StatusOr<size_t> after = connection.Receive(scratch, deadline);
  if (after.ok()) {
    return absl::DataLossError("a message arrived after DONE");
  }
  if (!absl::IsUnavailable(after.status())) return after.status();
  return connection.Close(deadline);
}

absl::Status ClientFinish(Connection& connection, std::span<std::byte> scratch,
                          Deadline deadline) {
  if (absl::Status status = SendText(connection, "DONE", deadline);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<std::string> done = ReceiveText(connection, scratch, deadline);
  if (!done.ok()) return done.status();
  if (*done != "DONE") {
    return absl::DataLossError(
        absl::StrCat("expected DONE, got \"", done->substr(0, 80), "\""));
  }
  return connection.Close(deadline);
}

Report::Row& Report::Row::Add(const std::string& name,
                              const std::string& value) {
  fields_.push_back({name, value, false});
  return *this;
}

Report::Row& Report::Row::Add(const std::string& name, double value) {
  fields_.push_back({name, absl::StrFormat("%.6g", value), true});
  return *this;
}

Report::Row& Report::Row::Add(const std::string& name, uint64_t value) {
  fields_.push_back({name, absl::StrCat(value), true});
  return *this;
}

Report::Row& Report::AddRow() {
  rows_.emplace_back();
  return rows_.back();
}

namespace {

std::string CsvField(const std::string& value) {
  if (value.find_first_of(",\"\n") == std::string::npos) return value;
  std::string quoted = "\"";
  for (char c : value) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

std::string JsonString(const std::string& value) {
  std::string out = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Report::Write(const std::string& csv_path,
                           const std::string& json_path) const {
  if (!csv_path.empty()) {
    std::string text;
    if (!rows_.empty()) {
      std::vector<std::string> names;
      for (const Row::Field& field : rows_.front().fields_) {
        names.push_back(CsvField(field.name));
      }
      absl::StrAppend(&text, absl::StrJoin(names, ","), "\n");
    }
    for (const Row& row : rows_) {
      std::vector<std::string> values;
      for (const Row::Field& field : row.fields_) {
        values.push_back(CsvField(field.value));
      }
      absl::StrAppend(&text, absl::StrJoin(values, ","), "\n");
    }
    if (absl::Status status = WriteFile(csv_path, text); !status.ok()) {
      return status;
    }
  }
  if (!json_path.empty()) {
    std::string text = "[\n";
    for (size_t r = 0; r < rows_.size(); ++r) {
      std::vector<std::string> members;
      for (const Row::Field& field : rows_[r].fields_) {
        members.push_back(absl::StrCat(
            JsonString(field.name), ": ",
            field.numeric ? field.value : JsonString(field.value)));
      }
      absl::StrAppend(&text, "  {", absl::StrJoin(members, ", "), "}",
                      r + 1 < rows_.size() ? ",\n" : "\n");
    }
    absl::StrAppend(&text, "]\n");
    if (absl::Status status = WriteFile(json_path, text); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

}  // namespace rdma_transport
