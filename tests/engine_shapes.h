// File: tests/engine_shapes.h
//
// The four shapes the engine suites run in: with or without a shared
// receive queue, busy-polled or with a readiness fd (EngineOptions). A
// parameterised suite instantiates itself over kEngineShapes and names its
// cases with EngineShapeName. Test-only.
//
//   class MyTest : public ::testing::TestWithParam<EngineShape> {};
//   INSTANTIATE_TEST_SUITE_P(Shapes, MyTest, EngineShapes(), EngineShapeName);

#ifndef RDMA_TRANSPORT_TESTS_ENGINE_SHAPES_H_
#define RDMA_TRANSPORT_TESTS_ENGINE_SHAPES_H_

#include <string>

#include "gtest/gtest.h"
#include "transport/connection_options.h"

namespace rdma_transport {

struct EngineShape {
  bool srq = false;
  ProgressMode progress = ProgressMode::kBusyPoll;
};

// "OwnRingsBusyPoll", "SrqBusyPoll", "OwnRingsEvent", "SrqEvent".
inline std::string EngineShapeName(
    const ::testing::TestParamInfo<EngineShape>& info) {
  return std::string(info.param.srq ? "Srq" : "OwnRings") +
         (info.param.progress == ProgressMode::kEvent ? "Event" : "BusyPoll");
}

inline auto EngineShapes() {
  return ::testing::Values(EngineShape{false, ProgressMode::kBusyPoll},
                           EngineShape{true, ProgressMode::kBusyPoll},
                           EngineShape{false, ProgressMode::kEvent},
                           EngineShape{true, ProgressMode::kEvent});
}

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_ENGINE_SHAPES_H_
