"""The headers a user of rdma_transport includes, by package.

Their code examples are compiled by //tests/header_examples, which reaches
them through each package's exports_files(PUBLIC_HEADERS[package]).
"""

PUBLIC_HEADERS = {
    "sim": [
        "device_profile.h",
        "fabric.h",
        "fault_injector.h",
        "profile_names.h",
        "sim_env.h",
        "sim_testing.h",
        "sim_verbs.h",
        "switch.h",
        "traffic_mix.h",
    ],
    "transport": [
        "config.h",
        "connect.h",
        "connection.h",
        "connection_options.h",
        "context.h",
        "deadline.h",
        "engine.h",
        "gid_subnet.h",
        "listener.h",
        "memory_region.h",
        "negotiation.h",
        "peer_region.h",
        "received_message.h",
    ],
    "verbs_shim": [
        "env.h",
        "env_thread.h",
        "ibverbs_backend.h",
        "mock_verbs.h",
        "verbs.h",
        "verbs_error.h",
        "verbs_wrapper.h",
    ],
}

def public_header_labels(package):
    """Labels of `package`'s public headers."""
    return ["//%s:%s" % (package, header) for header in PUBLIC_HEADERS[package]]
