// File: tests/flood_sockets.cc

#include "tests/flood_sockets.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "absl/status/statusor.h"
#include "tests/counting_allocator.h"

namespace rdma_transport {

rlim_t RaiseOpenFileLimit() {
  rlimit files = {};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0) return 0;
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  if (getrlimit(RLIMIT_NOFILE, &files) != 0) return 0;
  return files.rlim_cur;
}

int OpenFloodSocket(const std::string& address, const std::string& source) {
  const size_t colon = address.rfind(':');
  sockaddr_in peer = {};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(static_cast<uint16_t>(
      std::strtoul(address.substr(colon + 1).c_str(), nullptr, 10)));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &peer.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (!source.empty()) {
    sockaddr_in local = {};
    local.sin_family = AF_INET;
    inet_pton(AF_INET, source.c_str(), &local.sin_addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
      close(fd);
      return -1;
    }
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof(peer)) != 0 &&
      errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

bool WaitConnected(const std::vector<int>& fds, Deadline deadline) {
  std::vector<pollfd> waiting;
  for (int fd : fds) waiting.push_back({fd, POLLOUT, 0});
  while (!waiting.empty()) {
    if (Clock::now() >= deadline) return false;
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (poll(waiting.data(), waiting.size(),
             static_cast<int>(std::max<int64_t>(left.count(), 0))) < 0 &&
        errno != EINTR) {
      return false;
    }
    std::vector<pollfd> still;
    for (const pollfd& p : waiting) {
      if (p.revents & (POLLERR | POLLHUP)) return false;
      if (!(p.revents & POLLOUT)) still.push_back({p.fd, POLLOUT, 0});
    }
    waiting = std::move(still);
  }
  return true;
}

int StillOpen(const std::vector<int>& fds) {
  std::vector<pollfd> polled;
  for (int fd : fds) polled.push_back({fd, POLLIN | POLLRDHUP, 0});
  if (poll(polled.data(), polled.size(), 0) < 0) return -1;
  return static_cast<int>(
      std::count_if(polled.begin(), polled.end(), [](const pollfd& p) {
        return (p.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) == 0;
      }));
}

FloodSockets::~FloodSockets() {
  for (int fd : fds) close(fd);
}

ServerLoop::ServerLoop(Listener& listener,
                       std::vector<std::unique_ptr<Connection>>& accepted,
                       int heap_tag)
    : accepted_(accepted), thread_([this, &listener, heap_tag] {
        ScopedHeapTag tag(heap_tag);
        while (!stop_.load()) {
          absl::StatusOr<std::unique_ptr<Connection>> connection =
              listener.Accept(DeadlineIn(std::chrono::milliseconds(50)));
          if (connection.ok()) {
            std::lock_guard<std::mutex> lock(mu_);
            accepted_.push_back(*std::move(connection));
          }
        }
      }) {}

void ServerLoop::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

size_t ServerLoop::accepted_count() {
  std::lock_guard<std::mutex> lock(mu_);
  return accepted_.size();
}

}  // namespace rdma_transport
