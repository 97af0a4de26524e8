// File: verbs_shim/setup_network.h
//
// `SetupNetwork` is the channel connection setup runs over: listening,
// dialling and accepting byte streams. The streams themselves are connected,
// non-blocking stream sockets (file descriptors), read and written with
// read(2)/write(2) and waited on through an Env. Real TCP is the default
// (transport/tcp.h, TcpNetwork()); a simulated fabric supplies an in-memory
// one (sim/sim_env.h) whose streams are AF_UNIX socket pairs, so a handshake
// runs in virtual time and every byte is delivered the moment it is written.
//
//   SetupNetwork& network = ...;
//   absl::StatusOr<SetupListener> listening = network.Listen("0.0.0.0:0", 64);
//   absl::StatusOr<SetupStream> stream =
//       network.Connect(env, listening->address, deadline);
//
// Ownership: every fd returned belongs to the caller, who closes it (a
// listener's fd with CloseListener()). Thread-safety: every method may be
// called from any thread. Errors: kInvalidArgument for a malformed address,
// kNotFound for a name that does not resolve, kUnavailable when nobody
// listens or the peer refuses, kDeadlineExceeded at the deadline, the errno
// text otherwise.

#ifndef RDMA_TRANSPORT_VERBS_SHIM_SETUP_NETWORK_H_
#define RDMA_TRANSPORT_VERBS_SHIM_SETUP_NETWORK_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "verbs_shim/env.h"

namespace rdma_transport {

// One connected stream: its fd and both ends' addresses, for names.
struct SetupStream {
  int fd = -1;
  std::string local_address;
  std::string peer_address;
};

// A listening endpoint: `fd` is readable while a stream waits in Accept().
struct SetupListener {
  int fd = -1;
  std::string address;  // as bound: "ip:port", the port chosen if 0 was given
};

class SetupNetwork {
 public:
  virtual ~SetupNetwork() = default;

  virtual absl::StatusOr<SetupListener> Listen(std::string_view address,
                                               int backlog) = 0;
  // Dials `address`; waits through `env` until `deadline`.
  virtual absl::StatusOr<SetupStream> Connect(Env& env,
                                              std::string_view address,
                                              Deadline deadline) = 0;
  // The next stream waiting on `listener_fd`, or nullopt when none waits.
  // Never blocks.
  virtual absl::StatusOr<std::optional<SetupStream>> Accept(
      int listener_fd) = 0;
  // Stops listening and closes the fd; streams accepted earlier stay open.
  virtual void CloseListener(int listener_fd) = 0;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_VERBS_SHIM_SETUP_NETWORK_H_
