// File: sim/internal/handle_registry.h
//
// `HandleRegistry<Handle, Object>` owns the simulator's objects of one kind
// (QPs, CQs, SRQs) by the verbs handle the application holds, and finds one
// from its handle in one probe of a flat table: the data path looks a QP up
// on every post and a CQ on every poll, and with a thousand connections an
// unordered_map's bucket and node were two cache misses per call. The handle
// is only compared, never dereferenced, so an unknown or destroyed handle is
// found to be so safely.
//
// The lookup is a FlatIndex (flat_index.h); iteration (begin/end) is over
// the owning map, in no particular order.
//
// Thread-safety: none; FabricCore calls it under its lock.
//
//   HandleRegistry<ibv_qp, SimQp> qps;
//   qps.emplace(&qp->verbs, std::move(qp));
//   SimQp* found = qps.Find(handle);      // nullptr if unknown
//   qps.erase(handle);                    // frees the QP

#ifndef RDMA_TRANSPORT_SIM_INTERNAL_HANDLE_REGISTRY_H_
#define RDMA_TRANSPORT_SIM_INTERNAL_HANDLE_REGISTRY_H_

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <utility>

#include "sim/internal/flat_index.h"

namespace rdma_transport::sim::internal {

template <typename Handle, typename Object>
class HandleRegistry {
 public:
  using Map = std::unordered_map<const Handle*, std::unique_ptr<Object>>;

  // Takes `object`, found by `handle` from now on (which must be new).
  void emplace(const Handle* handle, std::unique_ptr<Object> object) {
    Object* raw = object.get();
    owned_.emplace(handle, std::move(object));
    index_.Insert(handle, raw);
  }

  // Forgets and frees the object of `handle`, if there is one.
  void erase(const Handle* handle) {
    if (owned_.erase(handle) > 0) index_.Erase(handle);
  }

  // The object of `handle`, or nullptr.
  Object* Find(const Handle* handle) const {
    return handle == nullptr ? nullptr : index_.Find(handle);
  }

  size_t size() const { return owned_.size(); }
  bool empty() const { return owned_.empty(); }
  typename Map::iterator begin() { return owned_.begin(); }
  typename Map::iterator end() { return owned_.end(); }
  typename Map::const_iterator begin() const { return owned_.begin(); }
  typename Map::const_iterator end() const { return owned_.end(); }

 private:
  Map owned_;
  FlatIndex<const Handle*, Object*> index_;
};

}  // namespace rdma_transport::sim::internal

#endif  // RDMA_TRANSPORT_SIM_INTERNAL_HANDLE_REGISTRY_H_
