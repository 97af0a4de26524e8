#include "transport/tcp.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

absl::Status ErrnoError(std::string_view call, int error) {
  return VerbsError(call, error);  // same shape: call, text, errno payload
}

// Waits until `fd` has `events`; kDeadlineExceeded when the deadline passes.
absl::Status WaitFor(Env& env, int fd, short events, Deadline deadline,
                     std::string_view what) {
  while (true) {
    pollfd entry = {fd, events, 0};
    const uint64_t token = env.PrepareWait();
    if (env.Wait(token, {&entry, 1}, deadline, WaitKind::kBlock) > 0) {
      return absl::OkStatus();
    }
    if (env.Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("timed out ", std::string(what)));
    }
  }
}

// Real TCP: the default SetupNetwork.
class TcpSetupNetwork final : public SetupNetwork {
 public:
  absl::StatusOr<SetupListener> Listen(std::string_view address,
                                       int backlog) override {
    absl::StatusOr<SocketAddress> resolved = ResolveTcpAddress(address);
    if (!resolved.ok()) return resolved.status();
    absl::StatusOr<Socket> socket = TcpListen(*resolved, backlog);
    if (!socket.ok()) return socket.status();
    absl::StatusOr<SocketAddress> bound = LocalAddress(socket->fd());
    std::string text =
        bound.ok() ? FormatSocketAddress(*bound) : std::string(address);
    return SetupListener{socket->Release(), std::move(text)};
  }

  absl::StatusOr<SetupStream> Connect(Env& env, std::string_view address,
                                      Deadline deadline) override {
    absl::StatusOr<SocketAddress> resolved = ResolveTcpAddress(address);
    if (!resolved.ok()) return resolved.status();
    absl::StatusOr<Socket> socket = TcpConnect(env, *resolved, deadline);
    if (!socket.ok()) return socket.status();
    absl::StatusOr<SocketAddress> local = LocalAddress(socket->fd());
    SetupStream stream;
    stream.local_address =
        local.ok() ? FormatSocketAddress(*local) : "<unknown>";
    stream.peer_address = FormatSocketAddress(*resolved);
    stream.fd = socket->Release();
    return stream;
  }

  absl::StatusOr<std::optional<SetupStream>> Accept(int listener_fd) override {
    sockaddr_storage peer = {};
    socklen_t length = sizeof(peer);
    int fd = accept4(listener_fd, reinterpret_cast<sockaddr*>(&peer), &length,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
          errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
        return std::optional<SetupStream>();
      }
      return ErrnoError("accept4", errno);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    SocketAddress address;
    address.storage = peer;
    address.length = length;
    // No getsockname(): under a flood every system call per accepted
    // socket counts, and the local address is the listener's.
    SetupStream stream;
    stream.fd = fd;
    stream.peer_address = FormatSocketAddress(address);
    return std::optional<SetupStream>(std::move(stream));
  }

  void CloseListener(int listener_fd) override { ::close(listener_fd); }
};

}  // namespace

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.Release();
  }
  return *this;
}

int Socket::Release() { return std::exchange(fd_, -1); }

void Socket::Close() {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
}

absl::StatusOr<HostPort> SplitHostPort(std::string_view host_port) {
  HostPort split;
  if (!host_port.empty() && host_port.front() == '[') {
    size_t close = host_port.find(']');
    if (close == std::string_view::npos || close + 1 >= host_port.size() ||
        host_port[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("address \"", std::string(host_port),
                       "\" is not of the form [ipv6]:port"));
    }
    split.host = std::string(host_port.substr(1, close - 1));
    split.port = std::string(host_port.substr(close + 2));
    return split;
  }
  size_t colon = host_port.rfind(':');
  if (colon == std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", std::string(host_port),
                     "\" has no port (expected host:port)"));
  }
  split.host = std::string(host_port.substr(0, colon));
  split.port = std::string(host_port.substr(colon + 1));
  return split;
}

absl::StatusOr<SocketAddress> ResolveTcpAddress(std::string_view host_port) {
  absl::StatusOr<HostPort> split = SplitHostPort(host_port);
  if (!split.ok()) return split.status();
  const std::string& host = split->host;
  const std::string_view port_text = split->port;
  uint32_t port = 0;
  if (port_text.empty() ||
      port_text.find_first_not_of("0123456789") != std::string_view::npos ||
      !absl::SimpleAtoi(std::string(port_text), &port) || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", std::string(host_port), "\" has port \"",
                     std::string(port_text), "\", expected 0..65535"));
  }

  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  const char* node = host.c_str();
  if (host.empty() || host == "*") {
    node = nullptr;
    hints.ai_flags |= AI_PASSIVE;
    hints.ai_family = AF_INET;
  }
  addrinfo* results = nullptr;
  const std::string service = std::to_string(port);
  int rc = getaddrinfo(node, service.c_str(), &hints, &results);
  if (rc != 0 || results == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot resolve \"", host, "\": ", gai_strerror(rc)));
  }
  SocketAddress address;
  std::memcpy(&address.storage, results->ai_addr, results->ai_addrlen);
  address.length = results->ai_addrlen;
  freeaddrinfo(results);
  return address;
}

std::string FormatSocketAddress(const SocketAddress& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.storage.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address.storage);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    return absl::StrCat(text, ":", ntohs(v4->sin_port));
  }
  if (address.storage.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address.storage);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    return absl::StrCat("[", text, "]:", ntohs(v6->sin6_port));
  }
  return "<unknown address family>";
}

SetupNetwork& TcpNetwork() {
  static TcpSetupNetwork* network = new TcpSetupNetwork();
  return *network;
}

SetupNetwork& SetupNetworkOf(Env& env) {
  SetupNetwork* network = env.setup_network();
  return network != nullptr ? *network : TcpNetwork();
}

absl::StatusOr<Socket> TcpConnect(Env& env, const SocketAddress& address,
                                  Deadline deadline) {
  Socket socket(::socket(address.storage.ss_family,
                         SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!socket.valid()) return ErrnoError("socket", errno);
  int one = 1;
  setsockopt(socket.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const std::string peer = FormatSocketAddress(address);
  if (::connect(socket.fd(),
                reinterpret_cast<const sockaddr*>(&address.storage),
                address.length) != 0) {
    if (errno != EINPROGRESS) {
      return absl::UnavailableError(
          absl::StrCat("connecting to ", peer, ": ", std::strerror(errno)));
    }
    if (absl::Status status = WaitFor(env, socket.fd(), POLLOUT, deadline,
                                      absl::StrCat("connecting to ", peer));
        !status.ok()) {
      return status;
    }
    int error = 0;
    socklen_t length = sizeof(error);
    getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      return absl::UnavailableError(
          absl::StrCat("connecting to ", peer, ": ", std::strerror(error)));
    }
  }
  return socket;
}

absl::StatusOr<Socket> TcpListen(const SocketAddress& address, int backlog) {
  Socket socket(::socket(address.storage.ss_family,
                         SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!socket.valid()) return ErrnoError("socket", errno);
  int one = 1;
  setsockopt(socket.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(socket.fd(), reinterpret_cast<const sockaddr*>(&address.storage),
             address.length) != 0) {
    return WithContext(
        ErrnoError("bind", errno),
        absl::StrCat("listening on ", FormatSocketAddress(address)));
  }
  if (::listen(socket.fd(), backlog) != 0) return ErrnoError("listen", errno);
  return socket;
}

absl::StatusOr<SocketAddress> LocalAddress(int fd) {
  SocketAddress address;
  address.length = sizeof(address.storage);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address.storage),
                  &address.length) != 0) {
    return ErrnoError("getsockname", errno);
  }
  return address;
}

absl::StatusOr<SocketAddress> PeerAddress(int fd) {
  SocketAddress address;
  address.length = sizeof(address.storage);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address.storage),
                  &address.length) != 0) {
    return ErrnoError("getpeername", errno);
  }
  return address;
}

absl::Status WriteAll(Env& env, int fd, std::span<const uint8_t> bytes,
                      Deadline deadline) {
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + written, bytes.size() - written,
                       MSG_NOSIGNAL);
    if (n > 0) {
      written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (absl::Status status =
              WaitFor(env, fd, POLLOUT, deadline,
                      absl::StrCat("writing (", written, " of ", bytes.size(),
                                   " bytes written)"));
          !status.ok()) {
        return status;
      }
      continue;
    }
    return absl::UnavailableError(
        absl::StrCat("peer went away while writing (", written, " of ",
                     bytes.size(), " bytes written): ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status ReadExact(Env& env, int fd, std::span<uint8_t> out,
                       Deadline deadline) {
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::recv(fd, out.data() + got, out.size() - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return absl::UnavailableError(
          absl::StrCat("peer closed the connection after ", got, " of ",
                       out.size(), " bytes"));
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (absl::Status status =
              WaitFor(env, fd, POLLIN, deadline,
                      absl::StrCat("reading (", got, " of ", out.size(),
                                   " bytes received)"));
          !status.ok()) {
        return status;
      }
      continue;
    }
    return absl::UnavailableError(
        absl::StrCat("reading from peer failed after ", got, " of ", out.size(),
                     " bytes: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> ReadAvailable(int fd, std::span<uint8_t> out) {
  while (true) {
    ssize_t n = ::recv(fd, out.data(), out.size(), 0);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) {
      return absl::UnavailableError("peer closed the connection");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    return absl::UnavailableError(
        absl::StrCat("reading from peer failed: ", std::strerror(errno)));
  }
}

}  // namespace rdma_transport
