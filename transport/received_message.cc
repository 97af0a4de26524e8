// File: transport/received_message.cc
//
// Releasing a borrowed receive slot (received_message.h).

#include "transport/received_message.h"

#include <utility>

#include "transport/connection.h"

namespace rdma_transport {

void ReceivedMessage::GiveBack() {
  Connection* connection = std::exchange(connection_, nullptr);
  data_ = {};
  connection->ReleaseBorrowed(slot_);
}

}  // namespace rdma_transport
