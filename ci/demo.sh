#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine and runs the README's main job: the
# transport end to end on the simulator (tools/rdma_demo.cc). Run as root
# (it installs Debian packages). MC_IB_TC defaults to 136 (DSCP 34) here so
# the demo shows a traffic class reaching the QP; set it to -1 for the
# system default.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/install_deps.sh build
MC_IB_TC="${MC_IB_TC:-136}" bazel run -c opt //tools:rdma_demo
