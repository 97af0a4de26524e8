"""rdma_transport's external dependencies, all from Debian packages.

A downstream WORKSPACE uses it like this:

    local_repository(name = "rdma_transport", path = "...")
    load("@rdma_transport//:deps.bzl", "rdma_transport_deps")
    rdma_transport_deps()

Every repository is declared with maybe(): declare your own `com_google_absl`
(or any other) before calling rdma_transport_deps() and yours is used instead.
The packages are installed by ci/install_deps.sh.
"""

load("@bazel_tools//tools/build_defs/repo:utils.bzl", "maybe")
load("//bazel:debian_repositories.bzl", "debian_library", "debian_rules_cc", "empty_repository")

def rdma_transport_deps():
    """Declares every repository rdma_transport needs, unless already declared."""
    maybe(debian_rules_cc, name = "rules_cc")

    # Bazel 4 registers Java toolchains even for pure C++ builds.
    maybe(
        native.local_repository,
        name = "rules_java",
        path = "/usr/share/bazel/rules/java",
    )
    maybe(
        native.local_repository,
        name = "bazel_skylib",
        path = "/usr/share/bazel/tools/skylib",
    )

    # Every cc_test depends on it; the real one would be downloaded.
    maybe(
        empty_repository,
        name = "remote_coverage_tools",
        build_file_content = 'filegroup(name = "coverage_report_generator", visibility = ["//visibility:public"])\n' +
                             'filegroup(name = "lcov_merger", visibility = ["//visibility:public"])\n',
    )

    maybe(
        debian_library,
        name = "com_google_googletest",
        module = "googletest",
        build_files = {Label("//bazel/third_party:googletest.BUILD"): "BUILD.bazel"},
        required_files = ["/usr/include/gtest/gtest.h", "/usr/include/gmock/gmock.h"],
        debian_packages = ["libgtest-dev", "libgmock-dev"],
    )
    maybe(
        debian_library,
        name = "com_google_absl",
        module = "abseil-cpp",
        build_files = {
            Label("//bazel/third_party:absl_flags.BUILD"): "absl/flags/BUILD.bazel",
            Label("//bazel/third_party:absl_status.BUILD"): "absl/status/BUILD.bazel",
            Label("//bazel/third_party:absl_strings.BUILD"): "absl/strings/BUILD.bazel",
            Label("//bazel/third_party:absl_root.BUILD"): "BUILD.bazel",
        },
        required_files = ["/usr/include/absl/status/statusor.h"],
        debian_packages = ["libabsl-dev"],
    )
    maybe(
        debian_library,
        name = "com_github_google_benchmark",
        module = "google_benchmark",
        build_files = {Label("//bazel/third_party:benchmark.BUILD"): "BUILD.bazel"},
        required_files = ["/usr/include/benchmark/benchmark.h"],
        debian_packages = ["libbenchmark-dev"],
    )
    maybe(
        debian_library,
        name = "rdma_core",
        module = "rdma-core",
        build_files = {Label("//bazel/third_party:rdma_core.BUILD"): "BUILD.bazel"},
        required_files = ["/usr/include/infiniband/verbs.h"],
        debian_packages = ["libibverbs-dev"],
    )
