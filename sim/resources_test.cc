// Devices, addressing, handles, destruction order (EBUSY), the leak report
// and the counters.

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/pair_fixture.h"

namespace rdma_transport::sim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string GidText(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, gid.raw, text, sizeof(text));
  return text;
}

TEST(DevicesTest, NamesAddressesAndLookups) {
  Fabric fabric;
  SimVerbs verbs(&fabric);
  EXPECT_EQ(*fabric.AddDevice(ConnectX6()), "sim_cx6_0");
  EXPECT_EQ(*fabric.AddDevice(ConnectX6()), "sim_cx6_1");
  EXPECT_EQ(*fabric.AddDevice(IntelE810()), "sim_e810_0");
  EXPECT_EQ(*fabric.AddDevice(SoftRoce(), "rxe0", "192.168.7.9"), "rxe0");
  EXPECT_THAT(*verbs.ListDevices(),
              ElementsAre("sim_cx6_0", "sim_cx6_1", "sim_e810_0", "rxe0"));
  EXPECT_EQ(fabric.AddDevice(ConnectX6(), "rxe0").status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(fabric.AddDevice(ConnectX6(), "x", "192.168.7.9").status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(fabric.AddDevice(ConnectX6(), "y", "not-an-ip").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(verbs.OpenDevice("mlx5_0").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(DevicesTest, RoceGidTable) {
  Fabric fabric;
  SimVerbs verbs(&fabric);
  const std::string cx6 = *fabric.AddDevice(ConnectX6());
  const std::string e810 = *fabric.AddDevice(IntelE810());
  const std::string rxe =
      *fabric.AddDevice(SoftRoce(), std::nullopt, "172.16.0.5");
  struct Case {
    std::string device;
    ibv_gid_type link_local_type;
    std::string ipv4_gid;
  };
  for (const Case& c : {Case{cx6, IBV_GID_TYPE_ROCE_V1, "::ffff:10.0.0.1"},
                        Case{e810, IBV_GID_TYPE_ROCE_V2, "::ffff:10.0.0.2"},
                        Case{rxe, IBV_GID_TYPE_ROCE_V1, "::ffff:172.16.0.5"}}) {
    SCOPED_TRACE(c.device);
    ibv_context* context = *verbs.OpenDevice(c.device);
    ibv_gid_entry entry{};
    ASSERT_OK(verbs.QueryGid(context, 1, 0, &entry));
    EXPECT_THAT(GidText(entry.gid), HasSubstr("fe80::"));
    EXPECT_EQ(entry.gid_type, c.link_local_type);
    EXPECT_EQ(entry.gid_index, 0u);
    EXPECT_EQ(entry.port_num, 1u);
    ASSERT_OK(verbs.QueryGid(context, 1, 1, &entry));
    EXPECT_EQ(GidText(entry.gid), c.ipv4_gid);
    EXPECT_EQ(entry.gid_type, IBV_GID_TYPE_ROCE_V2);
    EXPECT_EQ(entry.gid_index, 1u);
    EXPECT_ERRNO(verbs.QueryGid(context, 1, 2, &entry), ENODATA);
    EXPECT_ERRNO(verbs.QueryGid(context, 1, 5000, &entry), EINVAL);
    EXPECT_ERRNO(verbs.QueryGid(context, 2, 0, &entry), EINVAL);

    std::vector<ibv_gid_entry> table(8);
    EXPECT_EQ(*verbs.QueryGidTable(context, table), 2u);
    EXPECT_EQ(table[1].gid_index, 1u);
    EXPECT_EQ(*verbs.QueryGidTable(context, std::span(table).first(1)), 1u);
    ASSERT_OK(verbs.CloseDevice(context));
  }
}

TEST(DevicesTest, InfinibandPortHasALidAndAnIbGid) {
  Fabric fabric;
  SimVerbs verbs(&fabric);
  ibv_context* context =
      *verbs.OpenDevice(*fabric.AddDevice(ConnectX7Infiniband()));
  ibv_port_attr port{};
  ASSERT_OK(verbs.QueryPort(context, 1, &port));
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(port.lid, 1);
  ibv_gid_entry entry{};
  ASSERT_OK(verbs.QueryGid(context, 1, 0, &entry));
  EXPECT_EQ(entry.gid_type, IBV_GID_TYPE_IB);
  EXPECT_ERRNO(verbs.QueryGid(context, 1, 1, &entry), ENODATA);
  ASSERT_OK(verbs.CloseDevice(context));
}

using HandlesTest = PairTest;

TEST_F(HandlesTest, PublicFieldsAreFilled) {
  EndpointOptions options;
  options.with_completion_channel = true;
  ASSERT_NO_FATAL_FAILURE(CreatePair(ConnectX6(), ConnectX6(), options));
  EXPECT_STREQ(a_->context()->device->name, "sim_cx6_0");
  EXPECT_GE(a_->context()->async_fd, 0);
  EXPECT_GE(a_->channel()->fd, 0);
  EXPECT_EQ(a_->channel()->context, a_->context());
  EXPECT_EQ(a_->pd()->context, a_->context());
  EXPECT_EQ(a_->send_cq()->context, a_->context());
  EXPECT_EQ(a_->send_cq()->channel, a_->channel());
  EXPECT_EQ(a_->send_cq()->cq_context, a_.get());
  EXPECT_EQ(a_->send_cq()->cqe, 127);  // 64 rounded up the mlx5 way.
  EXPECT_EQ(a_->mr()->pd, a_->pd());
  EXPECT_EQ(a_->mr()->addr, a_->data());
  EXPECT_EQ(a_->mr()->length, 64u * 1024);
  EXPECT_EQ(a_->mr()->lkey, a_->mr()->rkey);
  EXPECT_NE(a_->mr()->lkey, b_->mr()->lkey);
  ibv_qp* qp = a_->qp();
  EXPECT_EQ(qp->context, a_->context());
  EXPECT_EQ(qp->pd, a_->pd());
  EXPECT_EQ(qp->send_cq, a_->send_cq());
  EXPECT_EQ(qp->recv_cq, a_->recv_cq());
  EXPECT_EQ(qp->qp_type, IBV_QPT_RC);
  EXPECT_EQ(qp->state, IBV_QPS_RESET);
  EXPECT_NE(qp->qp_num, b_->qp()->qp_num);
  EXPECT_LT(qp->qp_num, 1u << 24);
}

TEST_F(HandlesTest, CreationArgumentsAreValidated) {
  ASSERT_NO_FATAL_FAILURE(CreatePair());
  std::vector<uint8_t> memory(4096);
  EXPECT_ERRNO(verbs_->RegMr(a_->pd(), memory.data(), memory.size(),
                             IBV_ACCESS_REMOTE_WRITE),
               EINVAL);  // Remote write needs local write.
  EXPECT_ERRNO(verbs_->RegMr(a_->pd(), memory.data(), 0, 0), EINVAL);
  EXPECT_ERRNO(verbs_->RegMr(a_->pd(), nullptr, 4096, 0), EFAULT);
  EXPECT_ERRNO(verbs_->CreateCq(a_->context(), 0, nullptr, nullptr, 0), EINVAL);
  EXPECT_ERRNO(verbs_->CreateCq(a_->context(), 8, nullptr, nullptr, 99),
               EINVAL);
  ibv_comp_channel* channel = *verbs_->CreateCompChannel(b_->context());
  EXPECT_ERRNO(verbs_->CreateCq(a_->context(), 8, nullptr, channel, 0),
               EINVAL);  // The channel is b_'s.
  ASSERT_OK(verbs_->DestroyCompChannel(channel));

  ibv_qp_init_attr init{};
  init.send_cq = a_->send_cq();
  init.recv_cq = a_->recv_cq();
  init.cap = {.max_send_wr = 1,
              .max_recv_wr = 1,
              .max_send_sge = 1,
              .max_recv_sge = 1,
              .max_inline_data = 0};
  init.qp_type = IBV_QPT_UD;
  EXPECT_ERRNO(verbs_->CreateQp(a_->pd(), &init), EOPNOTSUPP);
  init.qp_type = IBV_QPT_RC;
  init.recv_cq = b_->recv_cq();
  EXPECT_ERRNO(verbs_->CreateQp(a_->pd(), &init), EINVAL);
  init.recv_cq = nullptr;
  EXPECT_ERRNO(verbs_->CreateQp(a_->pd(), &init), EINVAL);
  EXPECT_ERRNO(verbs_->CreateQp(a_->pd(), nullptr), EINVAL);
}

TEST(LimitsTest, DeviceObjectLimitsAreEnomem) {
  DeviceProfile tiny = IntelE810();
  tiny.name_prefix = "sim_tiny";
  tiny.max_qp = 1;
  tiny.max_pd = 1;
  tiny.max_mr = 1;
  tiny.max_cq = 1;
  Fabric fabric;
  SimVerbs verbs(&fabric);
  ibv_context* context = *verbs.OpenDevice(*fabric.AddDevice(tiny));
  ibv_pd* pd = *verbs.AllocPd(context);
  EXPECT_ERRNO(verbs.AllocPd(context), ENOMEM);
  std::vector<uint8_t> memory(64);
  ibv_mr* mr = *verbs.RegMr(pd, memory.data(), memory.size(), 0);
  EXPECT_ERRNO(verbs.RegMr(pd, memory.data(), memory.size(), 0), ENOMEM);
  ibv_cq* cq = *verbs.CreateCq(context, 4, nullptr, nullptr, 0);
  EXPECT_ERRNO(verbs.CreateCq(context, 4, nullptr, nullptr, 0), ENOMEM);
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {.max_send_wr = 1,
              .max_recv_wr = 1,
              .max_send_sge = 1,
              .max_recv_sge = 1,
              .max_inline_data = 0};
  ibv_qp* qp = *verbs.CreateQp(pd, &init);
  EXPECT_ERRNO(verbs.CreateQp(pd, &init), ENOMEM);
  ASSERT_OK(verbs.DestroyQp(qp));
  ASSERT_OK(verbs.DestroyCq(cq));
  ASSERT_OK(verbs.DeregMr(mr));
  ASSERT_OK(verbs.DeallocPd(pd));
  ASSERT_OK(verbs.CloseDevice(context));
}

TEST(OwnershipTest, DestroyingAnObjectInUseIsEbusy) {
  Fabric fabric;
  SimVerbs verbs(&fabric);
  ibv_context* context = *verbs.OpenDevice(*fabric.AddDevice(ConnectX6()));
  ibv_pd* pd = *verbs.AllocPd(context);
  ibv_comp_channel* channel = *verbs.CreateCompChannel(context);
  ibv_cq* cq = *verbs.CreateCq(context, 8, nullptr, channel, 0);
  std::vector<uint8_t> memory(64);
  ibv_mr* mr = *verbs.RegMr(pd, memory.data(), memory.size(), 0);
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {.max_send_wr = 1,
              .max_recv_wr = 1,
              .max_send_sge = 1,
              .max_recv_sge = 1,
              .max_inline_data = 0};
  ibv_qp* qp = *verbs.CreateQp(pd, &init);

  EXPECT_ERRNO(verbs.CloseDevice(context), EBUSY);
  EXPECT_ERRNO(verbs.DeallocPd(pd), EBUSY);                // MR and QP.
  EXPECT_ERRNO(verbs.DestroyCq(cq), EBUSY);                // QP.
  EXPECT_ERRNO(verbs.DestroyCompChannel(channel), EBUSY);  // CQ.
  ASSERT_OK(verbs.DestroyQp(qp));
  EXPECT_ERRNO(verbs.DeallocPd(pd), EBUSY);  // MR still.
  ASSERT_OK(verbs.DeregMr(mr));
  ASSERT_OK(verbs.DeallocPd(pd));
  ASSERT_OK(verbs.DestroyCq(cq));
  EXPECT_ERRNO(verbs.CloseDevice(context), EBUSY);  // Channel still.
  ASSERT_OK(verbs.DestroyCompChannel(channel));
  ASSERT_OK(verbs.CloseDevice(context));
  EXPECT_THAT(fabric.LeakReport(), IsEmpty());
}

TEST(LeakReportTest, ListsLiveObjectsInCreationOrder) {
  Fabric fabric;
  SimVerbs verbs(&fabric);
  ibv_context* context = *verbs.OpenDevice(*fabric.AddDevice(ConnectX6()));
  ibv_pd* pd = *verbs.AllocPd(context);
  ibv_cq* cq = *verbs.CreateCq(context, 8, nullptr, nullptr, 0);
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {.max_send_wr = 1,
              .max_recv_wr = 1,
              .max_send_sge = 1,
              .max_recv_sge = 1,
              .max_inline_data = 0};
  ibv_qp* qp = *verbs.CreateQp(pd, &init);

  std::vector<std::string> report;
  for (const LiveObject& object : fabric.LeakReport()) {
    report.push_back(object.ToString());
  }
  EXPECT_THAT(report,
              ElementsAre("context 1 on sim_cx6_0",
                          absl::StrCat("pd ", pd->handle, " on sim_cx6_0"),
                          absl::StrCat("cq ", cq->handle, " on sim_cx6_0"),
                          absl::StrCat("qp ", qp->qp_num, " on sim_cx6_0")));
  ASSERT_OK(verbs.DestroyQp(qp));
  ASSERT_OK(verbs.DestroyCq(cq));
  ASSERT_OK(verbs.DeallocPd(pd));
  ASSERT_OK(verbs.CloseDevice(context));
  EXPECT_THAT(fabric.LeakReport(), IsEmpty());
}

TEST(LeakReportTest, DestructorPrintsLeaksAndFreesThem) {
  ::testing::internal::CaptureStderr();
  {
    Fabric fabric;
    SimVerbs verbs(&fabric);
    ibv_context* context = *verbs.OpenDevice(*fabric.AddDevice(SoftRoce()));
    ASSERT_OK(verbs.AllocPd(context));
  }
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(printed, HasSubstr("2 verbs objects alive"));
  EXPECT_THAT(printed, HasSubstr("pd 2 on sim_rxe_0"));
}

using CountersTest = PairTest;
using MemoryRegionTest = PairTest;

TEST_F(CountersTest, CountWorkBytesAndCompletions) {
  EndpointOptions options;
  options.cap.max_inline_data = 64;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), options));
  ASSERT_OK(b_->PostRecv(1, 0, 1024));
  ASSERT_OK(b_->PostRecv(2, 1024, 1024));
  ASSERT_OK(
      a_->PostSend(3, IBV_WR_SEND, 0, 48, IBV_SEND_SIGNALED | IBV_SEND_INLINE));
  ASSERT_OK(a_->PostSend(4, IBV_WR_SEND, 0, 1000));
  ASSERT_OK(a_->PostSend(5, IBV_WR_RDMA_WRITE, 0, 500, IBV_SEND_SIGNALED, 0,
                         b_->address(4096), b_->rkey()));
  ASSERT_OK(a_->PostSend(6, IBV_WR_RDMA_READ, 8192, 300, IBV_SEND_SIGNALED, 0,
                         b_->address(0), b_->rkey()));
  EXPECT_EQ(a_->PollSendCq()->size(), 4u);
  EXPECT_EQ(b_->PollRecvCq()->size(), 2u);

  const SimCounters sender = *fabric_->DeviceCounters(a_->device());
  EXPECT_EQ(sender.send_wrs_posted, 4u);
  EXPECT_EQ(sender.recv_wrs_posted, 0u);
  EXPECT_EQ(sender.inline_sends, 1u);
  EXPECT_EQ(sender.dma_read_bytes, 1000u + 500u);   // Not the inline 48.
  EXPECT_EQ(sender.payload_bytes_delivered, 300u);  // The READ result.
  EXPECT_EQ(sender.packets_sent, 4u);
  EXPECT_EQ(sender.completions(IBV_WC_SUCCESS), 4u);

  const SimCounters receiver = *fabric_->DeviceCounters(b_->device());
  EXPECT_EQ(receiver.recv_wrs_posted, 2u);
  EXPECT_EQ(receiver.payload_bytes_delivered, 48u + 1000u + 500u);
  EXPECT_EQ(receiver.dma_read_bytes, 300u);  // Served the READ.
  EXPECT_EQ(receiver.packets_sent, 4u);      // ACKs and the READ response.
  EXPECT_EQ(receiver.completions(IBV_WC_SUCCESS), 2u);

  const SimCounters total = fabric_->Counters();
  EXPECT_EQ(total.send_wrs_posted, 4u);
  EXPECT_EQ(total.payload_bytes_delivered, 48u + 1000u + 500u + 300u);
  EXPECT_EQ(total.total_completions(), 6u);
  EXPECT_THAT(total.ToString(), HasSubstr("inline_sends=1"));
  EXPECT_THAT(total.ToString(), HasSubstr("IBV_WC_SUCCESS=6"));
  EXPECT_EQ(fabric_->DeviceCounters("nope").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(MemoryRegionTest, DeregisteredMemoryIsNoLongerReachable) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK_AND_ASSIGN(
      ibv_mr * extra,
      verbs_->RegMr(b_->pd(), b_->data(), 4096,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  const uint32_t extra_rkey = extra->rkey;
  ASSERT_OK(verbs_->DeregMr(extra));
  ASSERT_OK(a_->PostSend(1, IBV_WR_RDMA_WRITE, 0, 8, IBV_SEND_SIGNALED, 0,
                         b_->address(0), extra_rkey));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_REM_ACCESS_ERR);
  ibv_async_event event{};
  ASSERT_OK(verbs_->GetAsyncEvent(b_->context(), &event));
  verbs_->AckAsyncEvent(&event);
}

}  // namespace
}  // namespace rdma_transport::sim
