#include "tests/connection_pair.h"

#include <future>

#include "absl/strings/str_cat.h"
#include "sim/profile_names.h"
#include "verbs_shim/env_thread.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {

namespace {

DialResult DialWithDeadline(const Context& client, const Context& server,
                            const ConnectionOptions& client_options,
                            const ConnectionOptions& server_options,
                            const ListenerOptions& listener_options,
                            std::string_view listen_address,
                            std::optional<Deadline> accept_deadline) {
  DialResult result{nullptr, absl::UnknownError("not dialled"),
                    absl::UnknownError("not accepted")};
  absl::StatusOr<std::unique_ptr<Listener>> listener = Listener::Create(
      server, listen_address, server_options, listener_options);
  if (!listener.ok()) {
    result.client = listener.status();
    result.server = listener.status();
    return result;
  }
  result.listener = *std::move(listener);
  EnvFuture<absl::StatusOr<std::unique_ptr<Connection>>> dialled =
      RunInThread(client.env(), [&] {
        return Connect(client, result.listener->address(), client_options);
      });
  result.server = result.listener->Accept(accept_deadline.value_or(
      server.env().DeadlineIn(server_options.handshake_timeout * 2)));
  result.client = dialled.Get();
  return result;
}

}  // namespace

DialResult Dial(const Context& client, const Context& server,
                const ConnectionOptions& options,
                std::string_view listen_address,
                std::optional<Deadline> accept_deadline) {
  // Tests on Soft-RoCE listen on the VM's private addresses; no token
  // unless the test sets one.
  ListenerOptions listener_options;
  listener_options.allow_unauthenticated = true;
  return DialWithDeadline(client, server, options, options, listener_options,
                          listen_address, accept_deadline);
}

absl::Status DialPair(const Context& client, const Context& server,
                      const ConnectionOptions& options,
                      std::unique_ptr<Connection>& client_end,
                      std::unique_ptr<Connection>& server_end) {
  DialResult dial = Dial(client, server, options);
  if (!dial.client.ok()) {
    return WithContext(dial.client.status(), "dialling (client)");
  }
  if (!dial.server.ok()) {
    return WithContext(dial.server.status(), "accepting (server)");
  }
  client_end = *std::move(dial.client);
  server_end = *std::move(dial.server);
  return absl::OkStatus();
}

DialResult DialWith(const Context& client, const Context& server,
                    const ConnectionOptions& client_options,
                    const ConnectionOptions& server_options,
                    const ListenerOptions& listener_options,
                    std::string_view listen_address) {
  return DialWithDeadline(client, server, client_options, server_options,
                          listener_options, listen_address, std::nullopt);
}

absl::StatusOr<SimContexts> OpenTwoSimContexts(sim::Fabric& fabric,
                                               Verbs& verbs,
                                               std::string_view profile,
                                               const TransportConfig& config) {
  absl::StatusOr<sim::DeviceProfile> device_profile =
      sim::ProfileByName(profile);
  if (!device_profile.ok()) return device_profile.status();
  SimContexts opened;
  for (const char* address : {"10.0.0.1", "10.0.0.2"}) {
    absl::StatusOr<std::string> device =
        fabric.AddDevice(*device_profile, std::nullopt, address);
    if (!device.ok()) return device.status();
    absl::StatusOr<std::unique_ptr<Context>> context =
        Context::Open(verbs, *device, config);
    if (!context.ok()) return context.status();
    opened.devices.push_back(*device);
    opened.contexts.push_back(*std::move(context));
  }
  return opened;
}

absl::Status OpenTwoSimContextsWithEngine(
    sim::Fabric& fabric, Verbs& verbs, std::string_view profile,
    std::vector<std::string>& devices,
    std::vector<std::unique_ptr<Context>>& contexts,
    std::unique_ptr<Engine>& engine) {
  absl::StatusOr<SimContexts> opened =
      OpenTwoSimContexts(fabric, verbs, profile);
  if (!opened.ok()) return opened.status();
  devices = opened->devices;
  contexts = std::move(opened->contexts);
  absl::StatusOr<std::unique_ptr<Engine>> created =
      Engine::Create(*contexts[0]);
  if (!created.ok()) return created.status();
  engine = *std::move(created);
  return absl::OkStatus();
}

std::string LeakReportText(const sim::Fabric& fabric) {
  std::string report;
  for (const sim::LiveObject& object : fabric.LeakReport()) {
    absl::StrAppend(&report, object.ToString(), "\n");
  }
  return report;
}

}  // namespace rdma_transport
