// File: tests/measuring_verbs.cc

#include "tests/measuring_verbs.h"

#include <utility>

#include "tests/connection_pair.h"

namespace rdma_transport {

absl::StatusOr<ibv_mr*> MeasuringVerbs::RegMr(ibv_pd* pd, void* addr,
                                              size_t length, int access) {
  absl::StatusOr<ibv_mr*> mr = target()->RegMr(pd, addr, length, access);
  if (mr.ok()) {
    const int tag = HeapTag();
    SetHeapTag(kOther);  // the map's node is the test's, not the side's
    std::lock_guard<std::mutex> lock(mu_);
    mr_tags_[*mr] = tag;
    registered[tag] += static_cast<int64_t>(length);
    SetHeapTag(tag);
  }
  return mr;
}

absl::Status MeasuringVerbs::DeregMr(ibv_mr* mr) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = mr_tags_.find(mr);
    if (it != mr_tags_.end()) {
      registered[it->second] -= static_cast<int64_t>(mr->length);
      mr_tags_.erase(it);
    }
  }
  return target()->DeregMr(mr);
}

absl::StatusOr<ibv_cq*> MeasuringVerbs::CreateCq(ibv_context* context, int cqe,
                                                 void* cq_context,
                                                 ibv_comp_channel* channel,
                                                 int comp_vector) {
  const int tag = HeapTag();
  const int64_t before = LiveBytes(tag);
  absl::StatusOr<ibv_cq*> cq =
      target()->CreateCq(context, cqe, cq_context, channel, comp_vector);
  cq_bytes[tag] += LiveBytes(tag) - before;
  return cq;
}

absl::StatusOr<ibv_qp*> MeasuringVerbs::CreateQp(ibv_pd* pd,
                                                 ibv_qp_init_attr* init_attr) {
  const int tag = HeapTag();
  const int64_t before = LiveBytes(tag);
  absl::StatusOr<ibv_qp*> qp = target()->CreateQp(pd, init_attr);
  qp_bytes[tag] += LiveBytes(tag) - before;
  return qp;
}

void TwoDevices::SetUp() {
  ASSERT_TRUE(HeapCountingActive())
      << "operator new is not the counting one (tests/counting_allocator.h)";
  absl::StatusOr<SimContexts> opened = OpenTwoSimContexts(fabric_, verbs_);
  ASSERT_TRUE(opened.ok()) << opened.status();
  contexts_ = std::move(opened->contexts);
}

void TwoDevices::TearDown() {
  contexts_.clear();
  EXPECT_EQ(LeakReportText(fabric_), "");
}

sim::FabricOptions TwoDevices::WallClock() {
  sim::FabricOptions options;
  options.clock = sim::ClockMode::kWallClock;
  return options;
}

}  // namespace rdma_transport
