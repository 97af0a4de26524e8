// File: transport/received_message.cc
//
// Releasing a borrowed receive slot (received_message.h).

#include "transport/received_message.h"

#include <utility>

#include "transport/connection.h"

namespace rdma_transport {

ReceivedMessage& ReceivedMessage::operator=(ReceivedMessage&& other) noexcept {
  if (this != &other) {
    Release();
    connection_ = std::exchange(other.connection_, nullptr);
    slot_ = other.slot_;
    data_ = std::exchange(other.data_, {});
  }
  return *this;
}

void ReceivedMessage::Release() {
  if (connection_ == nullptr) return;
  Connection* connection = std::exchange(connection_, nullptr);
  data_ = {};
  connection->ReleaseBorrowed(slot_);
}

}  // namespace rdma_transport
