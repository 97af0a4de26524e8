#!/usr/bin/env bash
# The end-to-end suite over Soft-RoCE alone, inside the VM: what
# run_loaded_e2e.sh boots while it keeps every host core busy. Same topology
# and checks as step 3 of guest_ci.sh; one PASS/FAIL line in summary.txt
# (after a FAIL, INFO lines with the rxe counters and kernel log), exit 1 on
# failure.
set -euo pipefail

# shellcheck source=ci/softroce/guest_topology.sh
source "$SOFTROCE_DIR/guest_topology.sh"

out=${ARTIFACTS:-/artifacts}
summary="$out/summary.txt"
: >"$summary"
failures=0
# shellcheck source=ci/softroce/guest_lib.sh
source "$SOFTROCE_DIR/guest_lib.sh"
step_timeout=${STEP_TIMEOUT:-600}
scale=${RDMA_TEST_SCALE:-10}
export RDMA_TEST_CLIENT_DEVICE=$RXE_A RDMA_TEST_SERVER_DEVICE=$RXE_B

run_e2e_suite "${E2E_LABEL:-e2e suite over rxe}" e2e_ibverbs

cat "$summary"
if ((failures)); then
  echo "SOFTROCE E2E: FAIL"
  exit 1
fi
echo "SOFTROCE E2E: PASS"
