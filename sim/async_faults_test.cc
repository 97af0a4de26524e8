// Faults that raise async events: port down and up, GID table changes, fatal
// QP and CQ errors. Each test checks the exact events on each context, the
// port and QP states, and what happens to the packets.

#include <arpa/inet.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fault_injector.h"
#include "sim/pair_fixture.h"

namespace rdma_transport::sim {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

// ::ffff:a.b.c.d
ibv_gid MappedGid(const char* ipv4) {
  in_addr address{};
  EXPECT_EQ(inet_pton(AF_INET, ipv4, &address), 1) << ipv4;
  ibv_gid gid{};
  gid.raw[10] = 0xff;
  gid.raw[11] = 0xff;
  std::memcpy(&gid.raw[12], &address.s_addr, 4);
  return gid;
}

bool SameGid(const ibv_gid& a, const ibv_gid& b) {
  return std::memcmp(a.raw, b.raw, sizeof(a.raw)) == 0;
}

class AsyncFaultsTest : public PairTest {
 protected:
  FaultInjector& faults() { return fabric_->faults(); }

  uint64_t AsyncEvents(const std::string& device, ibv_event_type type) {
    return fabric_->DeviceCounters(device)->async_events(type);
  }

  // Checks `events` is exactly one event of `type` on port 1.
  static void ExpectOnePortEvent(const std::vector<ibv_async_event>& events,
                                 ibv_event_type type) {
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].event_type, type);
    EXPECT_EQ(events[0].element.port_num, 1);
  }
};

TEST_F(AsyncFaultsTest, PortDownRaisesPortErrOnEveryContextOfTheDevice) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  // A second context on b_'s device hears it too.
  ASSERT_OK_AND_ASSIGN(ibv_context * second, verbs_->OpenDevice(b_->device()));

  ASSERT_OK(faults().PortDown(b_->device()));
  EXPECT_EQ(PortState(*b_), IBV_PORT_DOWN);
  EXPECT_EQ(PortState(*a_), IBV_PORT_ACTIVE);
  ibv_port_attr port{};
  ASSERT_OK(verbs_->QueryPort(second, 1, &port));
  EXPECT_EQ(port.state, IBV_PORT_DOWN);
  ExpectOnePortEvent(TakeAsyncEvents(*b_), IBV_EVENT_PORT_ERR);
  ExpectOnePortEvent(TakeAsyncEvents(*verbs_, second), IBV_EVENT_PORT_ERR);
  EXPECT_TRUE(TakeAsyncEvents(*a_).empty());
  EXPECT_EQ(AsyncEvents(b_->device(), IBV_EVENT_PORT_ERR), 2u);
  EXPECT_EQ(fabric_->Counters().total_async_events(), 2u);

  // The port event moves no QP to ERR.
  EXPECT_EQ(QpState(*a_), IBV_QPS_RTS);
  EXPECT_EQ(QpState(*b_), IBV_QPS_RTS);

  // Already down: nothing more.
  ASSERT_OK(faults().PortDown(b_->device()));
  EXPECT_TRUE(TakeAsyncEvents(*b_).empty());

  ASSERT_OK(faults().PortUp(b_->device()));
  EXPECT_EQ(PortState(*b_), IBV_PORT_ACTIVE);
  ExpectOnePortEvent(TakeAsyncEvents(*b_), IBV_EVENT_PORT_ACTIVE);
  ExpectOnePortEvent(TakeAsyncEvents(*verbs_, second), IBV_EVENT_PORT_ACTIVE);
  EXPECT_EQ(AsyncEvents(b_->device(), IBV_EVENT_PORT_ACTIVE), 2u);

  // Already up: nothing more.
  ASSERT_OK(faults().PortUp(b_->device()));
  EXPECT_TRUE(TakeAsyncEvents(*b_).empty());
  ASSERT_OK(verbs_->CloseDevice(second));
}

TEST_F(AsyncFaultsTest, PacketsToADownPortAreLostUntilRetriesRunOut) {
  ConnectOptions connect;
  connect.retry_cnt = 3;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), {}, connect));
  ASSERT_OK(faults().PortDown(b_->device()));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));

  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_TRUE(b_->PollRecvCq()->empty());  // Never arrived.
  EXPECT_EQ(fabric_->DeviceCounters(a_->device())->retransmissions, 3u);
  EXPECT_EQ(fabric_->DeviceCounters(b_->device())->packets_dropped, 4u);
  EXPECT_EQ(QpState(*a_), IBV_QPS_ERR);  // By retry exhaustion.
  EXPECT_EQ(QpState(*b_), IBV_QPS_RTS);  // Untouched.
}

TEST_F(AsyncFaultsTest, PacketsFromADownPortAreLostAtTheSender) {
  ConnectOptions connect;
  connect.retry_cnt = 1;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), {}, connect));
  ASSERT_OK(faults().PortDown(a_->device()));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));

  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_TRUE(b_->PollRecvCq()->empty());
  EXPECT_EQ(fabric_->DeviceCounters(a_->device())->packets_dropped, 2u);
  EXPECT_EQ(fabric_->DeviceCounters(b_->device())->packets_dropped, 0u);
  EXPECT_EQ(fabric_->DeviceCounters(b_->device())->packets_sent, 0u);
}

TEST_F(AsyncFaultsTest, TrafficFlowsAgainWhenThePortComesBackInTime) {
  ConnectOptions connect;
  connect.timeout = 1;  // 8.192 us.
  FabricOptions manual;
  manual.progress_mode = ProgressMode::kManual;
  ASSERT_NO_FATAL_FAILURE(
      Connect(ConnectX6(), ConnectX6(), {}, connect, manual));
  ASSERT_OK(faults().PortDown(b_->device()));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));

  // Sent at 0 (on the wire 4 ns) and lost at 1 us; the timer (8.192 us from
  // when the packet left) sends it again at 8.196 us, lost again.
  fabric_->AdvanceClock(microseconds(15));
  EXPECT_TRUE(a_->PollSendCq()->empty());
  EXPECT_EQ(fabric_->DeviceCounters(b_->device())->packets_dropped, 2u);

  ASSERT_OK(faults().PortUp(b_->device()));
  fabric_->RunUntilIdle();
  // The next one, at 16.392 us, gets through: acknowledged at 18.400 us.
  EXPECT_EQ(fabric_->Now(), nanoseconds(18400));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
  EXPECT_EQ(PollOneRecv(*b_).status, IBV_WC_SUCCESS);
  EXPECT_EQ(fabric_->DeviceCounters(a_->device())->retransmissions, 2u);
  EXPECT_EQ(fabric_->DeviceCounters(b_->device())->packets_dropped, 2u);

  std::vector<ibv_async_event> events = TakeAsyncEvents(*b_);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].event_type, IBV_EVENT_PORT_ERR);
  EXPECT_EQ(events[1].event_type, IBV_EVENT_PORT_ACTIVE);
}

TEST_F(AsyncFaultsTest, ADeadDevicesPortRaisesNoPortEvents) {
  ASSERT_NO_FATAL_FAILURE(CreatePair());
  ASSERT_OK(faults().KillDevice(b_->device()));
  std::vector<ibv_async_event> events = TakeAsyncEvents(*b_);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event_type, IBV_EVENT_DEVICE_FATAL);

  ASSERT_OK(faults().PortDown(b_->device()));  // Reported down already.
  ASSERT_OK(faults().PortUp(b_->device()));    // Still dead.
  EXPECT_TRUE(TakeAsyncEvents(*b_).empty());
  EXPECT_EQ(PortState(*b_), IBV_PORT_DOWN);

  ASSERT_OK(faults().ReviveDevice(b_->device()));
  EXPECT_EQ(PortState(*b_), IBV_PORT_ACTIVE);
}

TEST_F(AsyncFaultsTest, ChangeIpv4ReplacesTheRoceV2GidAndReroutes) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));  // Resolves a_'s route.
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
  EXPECT_EQ(PollOneRecv(*b_).status, IBV_WC_SUCCESS);

  ASSERT_OK(faults().ChangeIpv4(b_->device(), "10.9.9.9"));
  ibv_gid_entry entry{};
  ASSERT_OK(verbs_->QueryGid(b_->context(), 1, 1, &entry));
  EXPECT_TRUE(SameGid(entry.gid, MappedGid("10.9.9.9")));
  EXPECT_EQ(entry.gid_type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_EQ(entry.gid_index, 1u);
  std::vector<ibv_gid_entry> table(8);
  ASSERT_OK_AND_ASSIGN(size_t filled,
                       verbs_->QueryGidTable(b_->context(), table));
  ASSERT_EQ(filled, 2u);
  EXPECT_TRUE(SameGid(table[1].gid, MappedGid("10.9.9.9")));
  ExpectOnePortEvent(TakeAsyncEvents(*b_), IBV_EVENT_GID_CHANGE);
  EXPECT_TRUE(TakeAsyncEvents(*a_).empty());
  EXPECT_EQ(AsyncEvents(b_->device(), IBV_EVENT_GID_CHANGE), 1u);

  // a_ still sends to the old GID, which leads nowhere now: lost at a_.
  const uint64_t lost_before =
      fabric_->DeviceCounters(a_->device())->packets_dropped;
  ASSERT_OK(b_->PostRecv(3, 0, 64));
  ASSERT_OK(a_->PostSend(4, IBV_WR_SEND, 0, 8));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(fabric_->DeviceCounters(a_->device())->packets_dropped,
            lost_before + 8);  // The first transmission and 7 retries.

  // A connection made with the new GID works.
  ASSERT_OK_AND_ASSIGN(auto c, Endpoint::Create(verbs_.get(), a_->device()));
  ASSERT_OK_AND_ASSIGN(auto d, Endpoint::Create(verbs_.get(), b_->device()));
  ASSERT_OK(c->ConnectTo(*d));
  ASSERT_OK(d->ConnectTo(*c));
  ASSERT_OK(d->PostRecv(5, 0, 64));
  ASSERT_OK(c->PostSend(6, IBV_WR_SEND, 0, 8));
  EXPECT_EQ(PollOneRecv(*d).status, IBV_WC_SUCCESS);
  ASSERT_OK(c->Close());
  ASSERT_OK(d->Close());

  // The address is taken now; AddDevice avoids it too.
  EXPECT_EQ(faults().ChangeIpv4(a_->device(), "10.9.9.9").code(),
            absl::StatusCode::kAlreadyExists);
}

TEST_F(AsyncFaultsTest, ChangeIpv4RefusesBadRequests) {
  ASSERT_NO_FATAL_FAILURE(CreatePair());
  EXPECT_EQ(faults().ChangeIpv4(b_->device(), "10.0.0.1").code(),
            absl::StatusCode::kAlreadyExists);  // a_'s address.
  EXPECT_EQ(faults().ChangeIpv4(b_->device(), "10.0.0").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(faults().ChangeIpv4("no_such_device", "10.1.1.1").code(),
            absl::StatusCode::kNotFound);
  ASSERT_OK(faults().ChangeIpv4(b_->device(), "10.0.0.2"));  // Its own: fine.
  EXPECT_EQ(TakeAsyncEvents(*b_).size(), 1u);
}

TEST_F(AsyncFaultsTest, ChangeIpv4OnInfinibandIsAFailedPrecondition) {
  ASSERT_NO_FATAL_FAILURE(
      CreatePair(ConnectX7Infiniband(), ConnectX7Infiniband()));
  EXPECT_EQ(faults().ChangeIpv4(b_->device(), "10.1.1.1").code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(AsyncFaultsTest, ChangeGidAddsAGidAtANewIndex) {
  ASSERT_NO_FATAL_FAILURE(CreatePair());
  ASSERT_OK(faults().ChangeGid(a_->device(), 2, MappedGid("192.168.0.1")));
  ASSERT_OK(faults().ChangeGid(b_->device(), 2, MappedGid("192.168.0.2")));
  ExpectOnePortEvent(TakeAsyncEvents(*a_), IBV_EVENT_GID_CHANGE);
  ExpectOnePortEvent(TakeAsyncEvents(*b_), IBV_EVENT_GID_CHANGE);
  std::vector<ibv_gid_entry> table(8);
  ASSERT_OK_AND_ASSIGN(size_t filled,
                       verbs_->QueryGidTable(b_->context(), table));
  ASSERT_EQ(filled, 3u);
  EXPECT_EQ(table[2].gid_index, 2u);
  EXPECT_EQ(table[2].port_num, 1u);
  EXPECT_EQ(table[2].gid_type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_TRUE(SameGid(table[2].gid, MappedGid("192.168.0.2")));

  // Connected through index 2 on both sides: routed by the new GIDs.
  ConnectOptions connect;
  connect.gid_index = 2;
  ASSERT_OK(a_->ConnectTo(*b_, connect));
  ASSERT_OK(b_->ConnectTo(*a_, connect));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
  EXPECT_EQ(PollOneRecv(*b_).status, IBV_WC_SUCCESS);
}

TEST_F(AsyncFaultsTest, ChangeGidRefusesBadRequests) {
  ASSERT_NO_FATAL_FAILURE(CreatePair());
  ibv_gid_entry a_gid{};
  ASSERT_OK(verbs_->QueryGid(a_->context(), 1, 1, &a_gid));
  EXPECT_EQ(faults().ChangeGid(b_->device(), 2, a_gid.gid).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(
      faults().ChangeGid(b_->device(), 1 << 20, MappedGid("10.7.7.7")).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(faults().ChangeGid(b_->device(), 2, ibv_gid{}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      faults().ChangeGid("no_such_device", 2, MappedGid("10.7.7.7")).code(),
      absl::StatusCode::kNotFound);
  EXPECT_TRUE(TakeAsyncEvents(*b_).empty());  // Refused: nothing changed.
}

TEST_F(AsyncFaultsTest, RemoveGidEmptiesTheSlotAndTheRouteGoes) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(faults().RemoveGid(b_->device(), 1));
  ibv_gid_entry entry{};
  EXPECT_ERRNO(verbs_->QueryGid(b_->context(), 1, 1, &entry), ENODATA);
  ExpectOnePortEvent(TakeAsyncEvents(*b_), IBV_EVENT_GID_CHANGE);

  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_TRUE(b_->PollRecvCq()->empty());

  EXPECT_EQ(faults().RemoveGid(b_->device(), 1).code(),
            absl::StatusCode::kNotFound);  // Empty now.
  EXPECT_EQ(faults().RemoveGid(b_->device(), 1 << 20).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(AsyncFaultsTest, RaiseQpFatalMovesTheQpToErrorAndFlushes) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(b_->PostRecv(2, 0, 64));
  ASSERT_OK(faults().RaiseQpFatal(b_->qp_num()));

  std::vector<ibv_async_event> events = TakeAsyncEvents(*b_);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event_type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(events[0].element.qp, b_->qp());
  EXPECT_EQ(b_->qp()->events_completed, 1u);
  EXPECT_TRUE(TakeAsyncEvents(*a_).empty());
  EXPECT_EQ(QpState(*b_), IBV_QPS_ERR);
  EXPECT_EQ(QpState(*a_), IBV_QPS_RTS);
  const std::vector<ibv_wc> flushed = *b_->PollRecvCq();
  ASSERT_EQ(flushed.size(), 2u);
  EXPECT_EQ(flushed[0].wr_id, 1u);
  EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(flushed[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(AsyncEvents(b_->device(), IBV_EVENT_QP_FATAL), 1u);

  EXPECT_EQ(faults().RaiseQpFatal(0xdead).code(), absl::StatusCode::kNotFound);
}

TEST_F(AsyncFaultsTest, RaiseCqErrorMakesTheCqUnusable) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(faults().RaiseCqError(b_->device(), b_->recv_cq()->handle));
  std::vector<ibv_async_event> events = TakeAsyncEvents(*b_);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(events[0].element.cq, b_->recv_cq());
  EXPECT_EQ(b_->recv_cq()->async_events_completed, 1u);
  EXPECT_EQ(AsyncEvents(b_->device(), IBV_EVENT_CQ_ERR), 1u);

  // As after an overrun: polls fail and new completions are lost.
  ibv_wc wc{};
  EXPECT_ERRNO(verbs_->PollCq(b_->recv_cq(), 1, &wc), EOVERFLOW);
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
  EXPECT_EQ(fabric_->DeviceCounters(b_->device())->completions_lost, 1u);
  EXPECT_EQ(fabric_->DeviceCounters(b_->device())->cq_overruns, 0u);

  // One error, one event.
  ASSERT_OK(faults().RaiseCqError(b_->device(), b_->recv_cq()->handle));
  EXPECT_TRUE(TakeAsyncEvents(*b_).empty());
}

TEST_F(AsyncFaultsTest, RaiseCqErrorOfQpTargetsItsSendOrReceiveCq) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(faults().RaiseCqErrorOfQp(a_->qp_num(), QpCq::kSend));
  ASSERT_OK(faults().RaiseCqErrorOfQp(a_->qp_num(), QpCq::kRecv));
  std::vector<ibv_async_event> events = TakeAsyncEvents(*a_);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(events[0].element.cq, a_->send_cq());
  EXPECT_EQ(events[1].event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(events[1].element.cq, a_->recv_cq());
  EXPECT_TRUE(TakeAsyncEvents(*b_).empty());
}

TEST_F(AsyncFaultsTest, RaiseCqErrorRefusesUnknownTargets) {
  ASSERT_NO_FATAL_FAILURE(CreatePair());
  // A CQ of a_ named with b_'s device.
  EXPECT_EQ(faults().RaiseCqError(b_->device(), a_->send_cq()->handle).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(faults().RaiseCqError("no_such_device", 1).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(faults().RaiseCqErrorOfQp(0xdead).code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(TakeAsyncEvents(*a_).empty());
}

}  // namespace
}  // namespace rdma_transport::sim
