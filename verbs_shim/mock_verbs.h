// File: verbs_shim/mock_verbs.h
//
// `MockVerbs`: a gMock backend for exact interaction tests of transport/
// policy. Errors are returned as the real backend returns them:
//
//   EXPECT_CALL(verbs, CreateQp(pd, Field(&ibv_qp_init_attr::cap,
//                                         Field(&ibv_qp_cap::max_inline_data,
//                                               236u))))
//       .WillOnce(Return(VerbsError("ibv_create_qp", EINVAL)));
//
// Handles are whatever the test returns (usually addresses of structs the
// test owns). Thread-safety: gMock's (expectations set before use).
//
// Defaults (ON_CALL, overridable): CreateAh succeeds with a handle the mock
// owns and DestroyAh accepts it, so every GID passes the address-handle
// check; ReadTrafficClassFile reports no file (no host override).

#ifndef RDMA_TRANSPORT_VERBS_SHIM_MOCK_VERBS_H_
#define RDMA_TRANSPORT_VERBS_SHIM_MOCK_VERBS_H_

#include "gmock/gmock.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport {

class MockVerbs : public Verbs {
 public:
  MockVerbs() {
    ON_CALL(*this, CreateAh(::testing::_, ::testing::_))
        .WillByDefault(::testing::Return(&default_ah_));
    ON_CALL(*this, DestroyAh(::testing::_))
        .WillByDefault(::testing::Return(absl::OkStatus()));
    ON_CALL(*this, ReadTrafficClassFile(::testing::_, ::testing::_))
        .WillByDefault(::testing::Return(TrafficClassFile{}));
  }

  MOCK_METHOD(absl::StatusOr<std::vector<std::string>>, ListDevices, (),
              (override));
  MOCK_METHOD(absl::StatusOr<ibv_context*>, OpenDevice, (std::string_view),
              (override));
  MOCK_METHOD(absl::Status, CloseDevice, (ibv_context*), (override));
  MOCK_METHOD(absl::Status, QueryDevice, (ibv_context*, ibv_device_attr*),
              (override));
  MOCK_METHOD(absl::Status, QueryPort, (ibv_context*, uint8_t, ibv_port_attr*),
              (override));
  MOCK_METHOD(absl::Status, QueryGid,
              (ibv_context*, uint8_t, uint32_t, ibv_gid_entry*), (override));
  MOCK_METHOD(absl::StatusOr<size_t>, QueryGidTable,
              (ibv_context*, std::span<ibv_gid_entry>), (override));
  MOCK_METHOD(absl::StatusOr<ibv_pd*>, AllocPd, (ibv_context*), (override));
  MOCK_METHOD(absl::Status, DeallocPd, (ibv_pd*), (override));
  MOCK_METHOD(absl::StatusOr<ibv_mr*>, RegMr, (ibv_pd*, void*, size_t, int),
              (override));
  MOCK_METHOD(absl::Status, DeregMr, (ibv_mr*), (override));
  MOCK_METHOD(absl::StatusOr<ibv_mw*>, AllocMw, (ibv_pd*, ibv_mw_type),
              (override));
  MOCK_METHOD(absl::Status, DeallocMw, (ibv_mw*), (override));
  MOCK_METHOD(absl::StatusOr<ibv_comp_channel*>, CreateCompChannel,
              (ibv_context*), (override));
  MOCK_METHOD(absl::Status, DestroyCompChannel, (ibv_comp_channel*),
              (override));
  MOCK_METHOD(absl::StatusOr<ibv_cq*>, CreateCq,
              (ibv_context*, int, void*, ibv_comp_channel*, int), (override));
  MOCK_METHOD(absl::Status, DestroyCq, (ibv_cq*), (override));
  MOCK_METHOD(absl::Status, ReqNotifyCq, (ibv_cq*, bool), (override));
  MOCK_METHOD(absl::Status, GetCqEvent, (ibv_comp_channel*, ibv_cq**, void**),
              (override));
  MOCK_METHOD(void, AckCqEvents, (ibv_cq*, unsigned int), (override));
  MOCK_METHOD(absl::StatusOr<ibv_qp*>, CreateQp, (ibv_pd*, ibv_qp_init_attr*),
              (override));
  MOCK_METHOD(absl::Status, ModifyQp, (ibv_qp*, ibv_qp_attr*, int), (override));
  MOCK_METHOD(absl::Status, QueryQp,
              (ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*), (override));
  MOCK_METHOD(absl::Status, DestroyQp, (ibv_qp*), (override));
  MOCK_METHOD(absl::Status, PostSend, (ibv_qp*, ibv_send_wr*, ibv_send_wr**),
              (override));
  MOCK_METHOD(absl::Status, PostRecv, (ibv_qp*, ibv_recv_wr*, ibv_recv_wr**),
              (override));
  MOCK_METHOD(absl::StatusOr<int>, PollCq, (ibv_cq*, int, ibv_wc*), (override));
  MOCK_METHOD(absl::StatusOr<ibv_srq*>, CreateSrq,
              (ibv_pd*, ibv_srq_init_attr*), (override));
  MOCK_METHOD(absl::Status, ModifySrq, (ibv_srq*, ibv_srq_attr*, int),
              (override));
  MOCK_METHOD(absl::Status, DestroySrq, (ibv_srq*), (override));
  MOCK_METHOD(absl::Status, PostSrqRecv,
              (ibv_srq*, ibv_recv_wr*, ibv_recv_wr**), (override));
  MOCK_METHOD(absl::StatusOr<ibv_ah*>, CreateAh, (ibv_pd*, ibv_ah_attr*),
              (override));
  MOCK_METHOD(absl::Status, DestroyAh, (ibv_ah*), (override));
  MOCK_METHOD(absl::StatusOr<TrafficClassFile>, ReadTrafficClassFile,
              (ibv_context*, uint8_t), (override));
  MOCK_METHOD(absl::Status, GetAsyncEvent, (ibv_context*, ibv_async_event*),
              (override));
  MOCK_METHOD(void, AckAsyncEvent, (ibv_async_event*), (override));

 private:
  ibv_ah default_ah_ = {};
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_VERBS_SHIM_MOCK_VERBS_H_
