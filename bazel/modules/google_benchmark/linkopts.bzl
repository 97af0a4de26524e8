"""The link flags pkg-config gives for this module's targets (bazel/pkg_config.bzl)."""

load("@pkg_config//:linkopts.bzl", _LINKOPTS = "LINKOPTS")

LINKOPTS = _LINKOPTS
