#include "sim/sim_network.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport::sim {

SimNetwork::~SimNetwork() {
  for (auto& [address, listening] : by_address_) {
    for (SetupStream& stream : listening.waiting) ::close(stream.fd);
    ::close(listening.event_fd);
  }
}

absl::StatusOr<SetupListener> SimNetwork::Listen(std::string_view address,
                                                 int backlog) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string_view::npos ||
      !absl::SimpleAtoi(std::string(address.substr(colon + 1)), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address \"", std::string(address), "\" is not of the form host:port"));
  }
  std::string host(address.substr(0, colon));
  if (host.empty() || host == "*" || host == "0.0.0.0") host = "127.0.0.1";
  std::lock_guard<std::mutex> lock(mu_);
  if (port == 0) {
    while (by_address_.count(absl::StrCat(host, ":", next_port_)) > 0) {
      ++next_port_;
    }
    port = next_port_++;
  }
  std::string bound = absl::StrCat(host, ":", port);
  if (by_address_.count(bound) > 0) {
    return VerbsError("bind", EADDRINUSE, bound);
  }
  const int event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd < 0) return VerbsError("eventfd", errno);
  Listening& listening = by_address_[bound];
  listening.address = bound;
  listening.event_fd = event_fd;
  listening.backlog = backlog > 0 ? backlog : 1;
  address_by_fd_[event_fd] = bound;
  return SetupListener{event_fd, bound};
}

absl::StatusOr<SetupStream> SimNetwork::Connect(Env& /*env*/,
                                                std::string_view address,
                                                Deadline /*deadline*/) {
  SetupStream client;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto found = by_address_.find(std::string(address));
    if (found == by_address_.end()) {
      return absl::UnavailableError(
          absl::StrCat("connecting to ", std::string(address),
                       ": connection refused (nobody listens there on the "
                       "simulated setup network)"));
    }
    Listening& listening = found->second;
    if (listening.waiting.size() >= static_cast<size_t>(listening.backlog)) {
      return absl::UnavailableError(
          absl::StrCat("connecting to ", std::string(address),
                       ": connection refused (the listener's backlog of ",
                       listening.backlog, " is full)"));
    }
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
                   fds) != 0) {
      return VerbsError("socketpair", errno);
    }
    const std::string local = absl::StrCat("127.0.0.1:", next_client_port_++);
    client = SetupStream{fds[0], local, listening.address};
    listening.waiting.push_back(SetupStream{fds[1], listening.address, local});
    if (listening.waiting.size() == 1) {
      const uint64_t one = 1;
      (void)!write(listening.event_fd, &one, sizeof(one));
    }
  }
  env_->Notify();
  return client;
}

absl::StatusOr<std::optional<SetupStream>> SimNetwork::Accept(int listener_fd) {
  std::lock_guard<std::mutex> lock(mu_);
  auto address = address_by_fd_.find(listener_fd);
  if (address == address_by_fd_.end()) {
    return VerbsError("accept", EBADF, "not a simulated listener");
  }
  Listening& listening = by_address_[address->second];
  if (listening.waiting.empty()) return std::optional<SetupStream>();
  SetupStream stream = listening.waiting.front();
  listening.waiting.pop_front();
  if (listening.waiting.empty()) {
    uint64_t count;
    (void)!read(listening.event_fd, &count, sizeof(count));
  }
  return std::optional<SetupStream>(stream);
}

void SimNetwork::CloseListener(int listener_fd) {
  std::lock_guard<std::mutex> lock(mu_);
  auto address = address_by_fd_.find(listener_fd);
  if (address == address_by_fd_.end()) return;
  auto found = by_address_.find(address->second);
  for (SetupStream& stream : found->second.waiting) ::close(stream.fd);
  ::close(found->second.event_fd);
  by_address_.erase(found);
  address_by_fd_.erase(address);
}

}  // namespace rdma_transport::sim
