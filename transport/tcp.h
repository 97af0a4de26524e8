// File: transport/tcp.h
//
// The stream plumbing of connection setup: TCP addresses, connecting and
// listening with deadlines, the TCP SetupNetwork (TcpNetwork(), the default
// of verbs_shim/setup_network.h), and exact reads and writes on any setup
// stream. Sockets are non-blocking; every wait goes through an Env and is
// bounded by a Deadline on its clock, so a silent peer costs at most the
// deadline and never a hang.
//
// Errors: kInvalidArgument for a malformed address, kNotFound for a name that
// does not resolve, kUnavailable when the peer refuses, resets or closes
// (with how many bytes had been read), kDeadlineExceeded when the deadline
// passes, and the errno text of the failing call otherwise.
//
// Thread-safety: functions are thread-safe; a Socket is thread-compatible.

#ifndef RDMA_TRANSPORT_TRANSPORT_TCP_H_
#define RDMA_TRANSPORT_TRANSPORT_TCP_H_

#include <sys/socket.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "transport/deadline.h"
#include "verbs_shim/env.h"
#include "verbs_shim/setup_network.h"

namespace rdma_transport {

// An owned file descriptor; closed on destruction. Move-only.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.Release()) {}
  Socket& operator=(Socket&& other) noexcept;
  ~Socket() { Close(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();
  void Close();

 private:
  int fd_ = -1;
};

struct SocketAddress {
  sockaddr_storage storage = {};
  socklen_t length = 0;
};

// "host:port" or "[ipv6]:port"; host may be a name (resolved with
// getaddrinfo) or empty / "*" for every local address (listening only).
// "host:port" or "[ipv6]:port" cut in two (brackets removed); nothing is
// resolved or range-checked. kInvalidArgument without a port.
struct HostPort {
  std::string host;
  std::string port;
};
absl::StatusOr<HostPort> SplitHostPort(std::string_view host_port);

absl::StatusOr<SocketAddress> ResolveTcpAddress(std::string_view host_port);
// "10.0.0.1:4791", "[fe80::1]:4791".
std::string FormatSocketAddress(const SocketAddress& address);

// Real TCP as a SetupNetwork; lives for the whole process.
SetupNetwork& TcpNetwork();
// `env`'s setup network, or TcpNetwork() when it has none.
SetupNetwork& SetupNetworkOf(Env& env);

absl::StatusOr<Socket> TcpConnect(Env& env, const SocketAddress& address,
                                  Deadline deadline);
// A listening socket (SO_REUSEADDR, non-blocking). Port 0 picks a free port:
// LocalAddress() tells which.
absl::StatusOr<Socket> TcpListen(const SocketAddress& address, int backlog);
absl::StatusOr<SocketAddress> LocalAddress(int fd);
absl::StatusOr<SocketAddress> PeerAddress(int fd);

// Writes all of `bytes`.
absl::Status WriteAll(Env& env, int fd, std::span<const uint8_t> bytes,
                      Deadline deadline);
// Reads exactly `out.size()` bytes.
absl::Status ReadExact(Env& env, int fd, std::span<uint8_t> out,
                       Deadline deadline);
// Reads what is available now, at most `out.size()` bytes, without waiting.
// Returns 0 when nothing is available; kUnavailable on EOF or reset.
absl::StatusOr<size_t> ReadAvailable(int fd, std::span<uint8_t> out);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_TCP_H_
