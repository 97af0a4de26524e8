// File: transport/received_message.h
//
// `ReceivedMessage`: a message received in place (Connection::
// ReceiveBorrowed): a view of the receive slot the NIC wrote it into, with
// no copy. The slot, and the credit the peer spent on it, go back when the
// view is released (Release() or the destructor), so a receiver that holds
// views holds back its peer: at most recv_slots - 2 can be held before the
// peer's Send() waits for credit, fewer by the credits this side has not yet
// announced (below the credit batch; up to 8 after a ping-pong on the
// default ring, credits.h).
//
//   Env& env = connection->env();  // deadlines on the connection's clock
//   absl::StatusOr<ReceivedMessage> message =
//       connection->ReceiveBorrowed(env.DeadlineIn(1s));
//   if (message.ok()) Consume(message->data());  // then it goes out of scope
//
// A receive loop can keep one view and hand it back to each receive, which
// gives its slot back in the same call (Connection::ReceiveBorrowed(&view)):
//
//   ReceivedMessage view;
//   while (connection->ReceiveBorrowed(&view, env.DeadlineIn(1s)).ok()) {
//     Consume(view.data());
//   }
//
// Ownership: the bytes belong to the connection; the view must be released
// before its connection is closed or destroyed (after Close() the bytes
// are gone and Release() only forgets them). Move-only. Thread-safety: one
// view is used by one thread at a time; Release() takes the connection's
// lock, so views of one connection may be released from any thread.

#ifndef RDMA_TRANSPORT_TRANSPORT_RECEIVED_MESSAGE_H_
#define RDMA_TRANSPORT_TRANSPORT_RECEIVED_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace rdma_transport {

class Connection;

class ReceivedMessage {
 public:
  ReceivedMessage() = default;
  ReceivedMessage(ReceivedMessage&& other) noexcept
      : connection_(std::exchange(other.connection_, nullptr)),
        slot_(other.slot_),
        data_(std::exchange(other.data_, {})) {}
  ReceivedMessage& operator=(ReceivedMessage&& other) noexcept {
    if (this != &other) {
      Release();
      connection_ = std::exchange(other.connection_, nullptr);
      slot_ = other.slot_;
      data_ = std::exchange(other.data_, {});
    }
    return *this;
  }
  ReceivedMessage(const ReceivedMessage&) = delete;
  ReceivedMessage& operator=(const ReceivedMessage&) = delete;
  ~ReceivedMessage() { Release(); }

  std::span<const std::byte> data() const { return data_; }
  size_t size() const { return data_.size(); }
  // True while it holds a slot (a moved-from or released view holds none).
  bool held() const { return connection_ != nullptr; }

  // Gives the slot back to the connection (reposted; its credit returns to
  // the peer). Idempotent; data() is empty afterwards.
  void Release() {
    if (connection_ != nullptr) GiveBack();
  }

 private:
  friend class Connection;
  ReceivedMessage(Connection* connection, uint32_t slot,
                  std::span<const std::byte> data)
      : connection_(connection), slot_(slot), data_(data) {}

  void GiveBack();  // Release() of a held view

  Connection* connection_ = nullptr;
  uint32_t slot_ = 0;
  std::span<const std::byte> data_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_RECEIVED_MESSAGE_H_
