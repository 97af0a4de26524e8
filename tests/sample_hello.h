// File: tests/sample_hello.h
//
// A well-formed HELLO for tests and benchmarks that speak the handshake by
// hand (transport/handshake.h): a RoCE v2 IPv4-mapped GID (::ffff:10.0.0.1),
// QP 0x1234 (which need not exist), 64 slots of 4 KiB, MTU 4096. Not the
// golden frames of handshake_test.cc, which are fixed bytes on purpose.
//
//   std::vector<uint8_t> frame = *EncodeHandshake(SampleHello("secret"));

#ifndef RDMA_TRANSPORT_TESTS_SAMPLE_HELLO_H_
#define RDMA_TRANSPORT_TESTS_SAMPLE_HELLO_H_

#include <string>
#include <utility>

#include "transport/handshake.h"

namespace rdma_transport {

inline HandshakeMessage SampleHello(std::string token) {
  HandshakeMessage hello;
  hello.type = HandshakeType::kHello;
  hello.endpoint.qp_num = 0x1234;
  hello.endpoint.psn = 0x42;
  hello.endpoint.gid.raw[10] = 0xff;
  hello.endpoint.gid.raw[11] = 0xff;
  hello.endpoint.gid.raw[12] = 10;
  hello.endpoint.gid.raw[15] = 1;
  hello.endpoint.port = 1;
  hello.endpoint.mtu = 4096;
  hello.recv_slots = 64;
  hello.slot_size = 4096;
  hello.token = std::move(token);
  return hello;
}

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_SAMPLE_HELLO_H_
