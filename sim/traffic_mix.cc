#include "sim/traffic_mix.h"

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rdma_transport::sim {
namespace {

absl::Status CheckCompletion(const ibv_wc& wc, const char* what) {
  if (wc.status == IBV_WC_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " completion wr_id ", wc.wr_id,
                                          " failed with status ", wc.status));
}

// Both ends of one RC connection between `from` and `to`.
absl::Status Connect(SimVerbs* verbs, const std::string& from,
                     const std::string& to, const EndpointOptions& endpoint,
                     const FlowOptions& flow, std::unique_ptr<Endpoint>& a,
                     std::unique_ptr<Endpoint>& b) {
  absl::StatusOr<std::unique_ptr<Endpoint>> made_a =
      Endpoint::Create(verbs, from, endpoint);
  if (!made_a.ok()) return made_a.status();
  a = *std::move(made_a);
  absl::StatusOr<std::unique_ptr<Endpoint>> made_b =
      Endpoint::Create(verbs, to, endpoint);
  if (!made_b.ok()) return made_b.status();
  b = *std::move(made_b);
  ConnectOptions connect;
  connect.path_mtu = flow.path_mtu;
  connect.traffic_class = flow.traffic_class;
  if (absl::Status status = a->ConnectTo(*b, connect); !status.ok()) {
    return status;
  }
  return b->ConnectTo(*a, connect);
}

}  // namespace

TrafficMix::~TrafficMix() { (void)Close(); }

absl::StatusOr<int> TrafficMix::AddWriteStream(const std::string& from,
                                               const std::string& to,
                                               const FlowOptions& options) {
  EndpointOptions endpoint;
  endpoint.buffer_bytes = size_t{options.message_bytes} * options.depth;
  endpoint.cap.max_send_wr = static_cast<uint32_t>(options.depth);
  auto stream = std::make_unique<Stream>();
  stream->options = options;
  if (absl::Status status = Connect(verbs_, from, to, endpoint, options,
                                    stream->requester, stream->responder);
      !status.ok()) {
    return status;
  }
  streams_.push_back(std::move(stream));
  return static_cast<int>(streams_.size() - 1);
}

absl::Status TrafficMix::AddPingPong(const std::string& client,
                                     const std::string& server,
                                     const FlowOptions& options) {
  if (ping_ != nullptr) return absl::AlreadyExistsError("one ping-pong only");
  EndpointOptions endpoint;
  endpoint.buffer_bytes = 2 * size_t{options.message_bytes};
  endpoint.cap.max_inline_data = options.message_bytes;
  auto ping = std::make_unique<PingPong>();
  ping->options = options;
  if (absl::Status status = Connect(verbs_, client, server, endpoint, options,
                                    ping->client, ping->server);
      !status.ok()) {
    return status;
  }
  if (ping->client->cap().max_inline_data >= options.message_bytes) {
    ping->flags |= IBV_SEND_INLINE;
  }
  ping_ = std::move(ping);
  // Receives at offset message_bytes; sends from offset 0.
  for (Endpoint* end : {ping_->client.get(), ping_->server.get()}) {
    if (absl::Status status =
            end->PostRecv(0, options.message_bytes, options.message_bytes);
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

uint64_t TrafficMix::bytes_written(int stream) const {
  return uint64_t{streams_[stream]->options.message_bytes} *
         streams_[stream]->completed;
}

absl::Status TrafficMix::PostWrite(Stream& stream) {
  const size_t slot = size_t{stream.options.message_bytes} *
                      (stream.posted % stream.options.depth);
  ++stream.posted;
  return stream.requester->PostSend(
      stream.posted, IBV_WR_RDMA_WRITE, slot, stream.options.message_bytes,
      IBV_SEND_SIGNALED, 0, stream.responder->address(slot),
      stream.responder->rkey());
}

absl::Status TrafficMix::Ping() {
  ping_->sent = fabric_->Now();
  return ping_->client->PostSend(1, IBV_WR_SEND, 0,
                                 ping_->options.message_bytes, ping_->flags);
}

absl::Status TrafficMix::PollAll() {
  for (auto& stream : streams_) {
    absl::StatusOr<std::vector<ibv_wc>> done = stream->requester->PollSendCq();
    if (!done.ok()) return done.status();
    for (const ibv_wc& wc : *done) {
      if (absl::Status status = CheckCompletion(wc, "WRITE"); !status.ok()) {
        return status;
      }
      ++stream->completed;
      if (!stream->MayPost()) continue;
      if (absl::Status status = PostWrite(*stream); !status.ok()) {
        return status;
      }
    }
  }
  if (ping_ == nullptr) return absl::OkStatus();
  const uint32_t bytes = ping_->options.message_bytes;
  for (Endpoint* end : {ping_->client.get(), ping_->server.get()}) {
    absl::StatusOr<std::vector<ibv_wc>> sent = end->PollSendCq();
    if (!sent.ok()) return sent.status();
    for (const ibv_wc& wc : *sent) {
      if (absl::Status status = CheckCompletion(wc, "SEND"); !status.ok()) {
        return status;
      }
    }
    absl::StatusOr<std::vector<ibv_wc>> received = end->PollRecvCq();
    if (!received.ok()) return received.status();
    for (const ibv_wc& wc : *received) {
      if (absl::Status status = CheckCompletion(wc, "RECV"); !status.ok()) {
        return status;
      }
      if (absl::Status status = end->PostRecv(0, bytes, bytes); !status.ok()) {
        return status;
      }
      if (end == ping_->server.get()) {  // Echo it.
        if (absl::Status status =
                end->PostSend(2, IBV_WR_SEND, 0, bytes, ping_->flags);
            !status.ok()) {
          return status;
        }
        continue;
      }
      const std::chrono::nanoseconds round_trip = fabric_->Now() - ping_->sent;
      one_way_us_.push_back(static_cast<double>(round_trip.count()) / 2000.0);
      if (absl::Status status = Ping(); !status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

absl::Status TrafficMix::Run(const std::function<bool()>& done) {
  for (auto& stream : streams_) {
    while (stream->posted - stream->completed < stream->options.depth &&
           stream->MayPost()) {
      if (absl::Status status = PostWrite(*stream); !status.ok()) {
        return status;
      }
    }
  }
  if (ping_ != nullptr && !ping_->started) {
    ping_->started = true;
    if (absl::Status status = Ping(); !status.ok()) return status;
  }
  while (!done()) {
    if (!fabric_->Step()) {
      return absl::DeadlineExceededError(
          "the fabric went idle before the traffic mix was done");
    }
    if (absl::Status status = PollAll(); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status TrafficMix::Close() {
  absl::Status first = absl::OkStatus();
  auto close = [&first](std::unique_ptr<Endpoint>& end) {
    if (end == nullptr) return;
    if (absl::Status status = end->Close(); !status.ok() && first.ok()) {
      first = status;
    }
    end.reset();
  };
  for (auto& stream : streams_) {
    close(stream->requester);
    close(stream->responder);
  }
  streams_.clear();
  if (ping_ != nullptr) {
    close(ping_->client);
    close(ping_->server);
    ping_.reset();
  }
  return first;
}

}  // namespace rdma_transport::sim
