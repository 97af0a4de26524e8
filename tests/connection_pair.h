// File: tests/connection_pair.h
//
// Setup shared by the tests that need connected pairs: dialling a Listener
// from another thread of the same process, and two simulated NICs with a
// transport Context on each. Test-only; thread-compatible.
//
//   absl::StatusOr<SimContexts> sim = OpenTwoSimContexts(fabric, verbs);
//   DialResult dial = Dial(*sim->contexts[0], *sim->contexts[1], options);
//   ASSERT_TRUE(dial.client.ok() && dial.server.ok());

#ifndef RDMA_TRANSPORT_TESTS_CONNECTION_PAIR_H_
#define RDMA_TRANSPORT_TESTS_CONNECTION_PAIR_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sim/fabric.h"
#include "transport/config.h"
#include "transport/connection.h"
#include "transport/context.h"
#include "transport/engine.h"
#include "transport/listener.h"

namespace rdma_transport {

struct DialResult {
  std::unique_ptr<Listener> listener;  // null if it could not be created
  absl::StatusOr<std::unique_ptr<Connection>> client;
  absl::StatusOr<std::unique_ptr<Connection>> server;
};

// Listens with `server` on `listen_address`, dials it from `client` on
// another thread, and accepts once, waiting until `accept_deadline` (by
// default twice the handshake timeout).
DialResult Dial(const Context& client, const Context& server,
                const ConnectionOptions& options,
                std::string_view listen_address = "127.0.0.1:0",
                std::optional<Deadline> accept_deadline = std::nullopt);

// Dial(), then the two ends moved into `client_end` and `server_end`; the
// failure of the first end that has none, named, otherwise.
absl::Status DialPair(const Context& client, const Context& server,
                      const ConnectionOptions& options,
                      std::unique_ptr<Connection>& client_end,
                      std::unique_ptr<Connection>& server_end);

// The same with each side's options apart (the server's token and shape
// from `server_options`) and the listener's own options.
DialResult DialWith(const Context& client, const Context& server,
                    const ConnectionOptions& client_options,
                    const ConnectionOptions& server_options,
                    const ListenerOptions& listener_options,
                    std::string_view listen_address = "127.0.0.1:0");

struct SimContexts {
  std::vector<std::string> devices;  // client's, then server's
  std::vector<std::unique_ptr<Context>> contexts;
};

// Adds two NICs of `profile` (sim/profile_names.h) to `fabric`, at 10.0.0.1
// and 10.0.0.2, and opens a Context on each through `verbs` (the fabric's
// SimVerbs, or a wrapper over it).
absl::StatusOr<SimContexts> OpenTwoSimContexts(
    sim::Fabric& fabric, Verbs& verbs, std::string_view profile = "cx7",
    const TransportConfig& config = {});

// OpenTwoSimContexts(), then an Engine (default options) on the client's
// Context: fills `devices`, `contexts` and `engine`.
absl::Status OpenTwoSimContextsWithEngine(
    sim::Fabric& fabric, Verbs& verbs, std::string_view profile,
    std::vector<std::string>& devices,
    std::vector<std::unique_ptr<Context>>& contexts,
    std::unique_ptr<Engine>& engine);

// The fabric's leak report, one object a line; empty when nothing leaked.
std::string LeakReportText(const sim::Fabric& fabric);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_CONNECTION_PAIR_H_
