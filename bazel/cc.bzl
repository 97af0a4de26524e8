"""rdma_transport's C++ rules: rules_cc's, with the language level and warnings.

Every BUILD file of rdma_transport loads cc_library, cc_binary and cc_test
from here instead of @rules_cc//cc:defs.bzl, so that C++20 and the warning
set travel with the targets: a project that depends on rdma_transport builds
it correctly with no flags copied from our .bazelrc (a dependency's .bazelrc
is never read). -Werror is not here: CI adds it for this repository's own
code with --config=werror (.bazelrc); consumers never get it.

Note that rdma_transport's public headers use C++20 (std::span): a target of
yours that includes them is C++20 code too (docs/downstream.md).
"""

load("@rules_cc//cc:defs.bzl", _cc_binary = "cc_binary", _cc_library = "cc_library", _cc_test = "cc_test")

# Added before a target's own copts, so a target can still override them.
RDMA_TRANSPORT_COPTS = [
    "-std=c++20",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
]

def cc_library(name, copts = [], **kwargs):
    _cc_library(name = name, copts = RDMA_TRANSPORT_COPTS + copts, **kwargs)

def cc_binary(name, copts = [], **kwargs):
    _cc_binary(name = name, copts = RDMA_TRANSPORT_COPTS + copts, **kwargs)

def cc_test(name, copts = [], **kwargs):
    _cc_test(name = name, copts = RDMA_TRANSPORT_COPTS + copts, **kwargs)
