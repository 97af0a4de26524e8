#include "transport/peer_region.h"

#include <utility>

#include "verbs_shim/verbs_error.h"

namespace rdma_transport {

bool BoundWindow::bound() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mw_ != nullptr;
}

absl::Status BoundWindow::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  if (mw_ == nullptr) return absl::OkStatus();
  ibv_mw* mw = std::exchange(mw_, nullptr);
  return verbs_->DeallocMw(mw);
}

PeerRegion& PeerRegion::operator=(PeerRegion&& other) noexcept {
  if (this != &other) {
    (void)Release();
    window_ = std::move(other.window_);
    remote_ = std::exchange(other.remote_, RemoteRegion{});
  }
  return *this;
}

absl::Status PeerRegion::Release() {
  if (window_ == nullptr) return absl::OkStatus();
  absl::Status status = window_->Release();
  window_.reset();
  return status;
}

}  // namespace rdma_transport
