// File: sim/sim_network.h
//
// `SimNetwork` is the in-memory SetupNetwork (verbs_shim/setup_network.h) of
// a virtual-time SimEnv: connection setup without the kernel's TCP stack, so
// that a handshake takes no real time and its bytes are where they were
// written the moment the write returns.
//
// Listen("host:port") registers the address string ("host:0" takes the next
// free port from 20000, "0.0.0.0"/"*"/"" become "127.0.0.1") and returns an
// eventfd that is readable while a stream waits. Connect(address) finds the
// listener by that exact string (kUnavailable "connection refused" when none
// listens or its backlog is full) and makes an AF_UNIX stream socket pair:
// one end is queued for Accept(), the other returned. Closing one end is
// what the other sees when its peer's process dies: EOF.
//
// Thread-safety: every method may be called from any thread. Owned by its
// SimEnv, which it notifies when a stream is queued.

#ifndef RDMA_TRANSPORT_SIM_SIM_NETWORK_H_
#define RDMA_TRANSPORT_SIM_SIM_NETWORK_H_

#include <deque>
#include <map>
#include <mutex>
#include <string>

#include "verbs_shim/env.h"
#include "verbs_shim/setup_network.h"

namespace rdma_transport::sim {

class SimNetwork final : public SetupNetwork {
 public:
  explicit SimNetwork(Env* env) : env_(env) {}
  ~SimNetwork() override;

  absl::StatusOr<SetupListener> Listen(std::string_view address,
                                       int backlog) override;
  absl::StatusOr<SetupStream> Connect(Env& env, std::string_view address,
                                      Deadline deadline) override;
  absl::StatusOr<std::optional<SetupStream>> Accept(int listener_fd) override;
  void CloseListener(int listener_fd) override;

 private:
  struct Listening {
    std::string address;
    int event_fd = -1;
    int backlog = 0;
    std::deque<SetupStream> waiting;
  };

  Env* const env_;
  std::mutex mu_;
  std::map<std::string, Listening> by_address_;
  std::map<int, std::string> address_by_fd_;
  int next_port_ = 20000;
  int next_client_port_ = 40000;
};

}  // namespace rdma_transport::sim

#endif  // RDMA_TRANSPORT_SIM_SIM_NETWORK_H_
