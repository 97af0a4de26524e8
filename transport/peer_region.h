// File: transport/peer_region.h
//
// `PeerRegion`: a range of a registered region opened to the peer of ONE
// connection. Connection::BindRegion() (connection.h) makes it: a type 2
// memory window, bound by an IBV_WR_BIND_MW on that connection's send queue
// to its QP. Its rkey works only for RDMA WRITE/READ arriving on that QP,
// only inside the range, and only with the access given; a request from any
// other connection with that rkey fails with IBV_WC_REM_ACCESS_ERR at the
// requester (kPermissionDenied there), and the QP it arrived at goes to
// error as on hardware, failing that connection too.
//
//   absl::StatusOr<MemoryRegion> region =
//       context.RegisterMemory(buffer, kLocalWrite | kBindable);
//   absl::StatusOr<PeerRegion> for_a = connection_a->BindRegion(
//       *region, /*offset=*/0, /*length=*/4096, kRemoteRead | kRemoteWrite);
//   RemoteRegion descriptor = for_a->remote();  // send it to peer A only
//   // ... peer A writes and reads [0, 4096) of the region ...
//   absl::Status released = for_a->Release();   // the rkey is dead now
//
// Shared registration (MemoryRegion::remote(), with kRemoteRead/kRemoteWrite)
// remains the default; a region registered with kBindable and no remote
// flag grants nothing remote except through its PeerRegions.
//
// Lifetime. The window lives until the first of: Release() (or the
// destructor), and the connection's Close() or destruction, which
// deallocates every window still bound to it before destroying the QP. After
// that the PeerRegion is empty (valid() false, Release() OK) and may be
// destroyed at any time, before or after the connection. A connection that
// failed keeps its windows until it is closed, but its QP is in error and
// answers nothing, so their rkeys are dead already. The MemoryRegion must
// outlive its PeerRegions (verbs refuses to deregister a region with bound
// windows: EINVAL on rxe).
//
// Thread-safety: Release() and the accessors may be called from any thread,
// concurrently with the connection's calls and its Close(), but not
// concurrently with each other on the same PeerRegion. Move-only.

#ifndef RDMA_TRANSPORT_TRANSPORT_PEER_REGION_H_
#define RDMA_TRANSPORT_TRANSPORT_PEER_REGION_H_

#include <memory>
#include <mutex>

#include "absl/status/status.h"
#include "transport/memory_region.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport {

// One bound window, shared by its PeerRegion and its Connection, whichever
// releases it first deallocating it.
class BoundWindow {
 public:
  BoundWindow(Verbs* verbs, ibv_mw* mw) : verbs_(verbs), mw_(mw) {}
  BoundWindow(const BoundWindow&) = delete;
  BoundWindow& operator=(const BoundWindow&) = delete;
  ~BoundWindow() { (void)Release(); }

  bool bound() const;
  // Deallocates the window (its rkey dies); OK if already done.
  absl::Status Release();

 private:
  mutable std::mutex mu_;
  Verbs* const verbs_;
  ibv_mw* mw_;  // guarded by mu_; null once released
};

class PeerRegion {
 public:
  PeerRegion() = default;
  PeerRegion(std::shared_ptr<BoundWindow> window, RemoteRegion remote)
      : window_(std::move(window)), remote_(remote) {}
  PeerRegion(PeerRegion&& other) noexcept { *this = std::move(other); }
  PeerRegion& operator=(PeerRegion&& other) noexcept;
  ~PeerRegion() { (void)Release(); }

  // True until released here or by the connection's close.
  bool valid() const { return window_ != nullptr && window_->bound(); }
  // What the peer addresses: the bound range's address, its length, and
  // the window's rkey.
  const RemoteRegion& remote() const { return remote_; }

  // Deallocates the window now; the status is ibv_dealloc_mw's.
  absl::Status Release();

 private:
  std::shared_ptr<BoundWindow> window_;
  RemoteRegion remote_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_PEER_REGION_H_
