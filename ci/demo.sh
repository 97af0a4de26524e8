#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine and runs the README's main job: the
# transport end to end on the simulator (tools/rdma_demo.cc). Run it as root
# or as a user who may sudo: only the Debian packages it installs need root
# (ci/install_deps.sh asks sudo for them when not root). MC_IB_TC defaults
# to 136 (DSCP 34) here so the demo shows a traffic class reaching the QP;
# set it to -1 for the system default.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/install_deps.sh build
# The disk cache CI's builds share (ci/bazel_disk_cache.sh): a machine that
# ran the demo or the tests before compiles only what changed.
source ci/bazel_disk_cache.sh
use_bazel_disk_cache >/dev/null
MC_IB_TC="${MC_IB_TC:-136}" bazel run -c opt //tools:rdma_demo
