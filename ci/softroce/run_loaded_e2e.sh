#!/usr/bin/env bash
# The e2e suite over Soft-RoCE while every host core is saturated: the
# condition under which a healthy 16 MiB READ used to be declared dead (a
# check that passes only on an idle machine is a defect).
#
#   ci/softroce/run_loaded_e2e.sh [--out-dir DIR] [run_vm.sh arguments...]
#
# Starts one busy loop per host core (at the default priority, so the VM's
# emulation competes with them), boots a VM per kernel of
# SOFTROCE_LOADED_KERNELS (default: trixie, Linux 6.12, the middle of the
# three; the unloaded stage runs every kernel, and what load tests is our
# timing, not the kernel's) with guest_e2e.sh through run_ci_stage.sh
# (SOFTROCE_GUEST=e2e), then stops the load, whatever happened. Artifacts in DIR (default .cache/softroce-loaded/). Exit status
# is run_ci_stage.sh's.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out_dir="$repo/.cache/softroce-loaded"
if [[ "${1:-}" == --out-dir ]]; then
  out_dir=${2:?--out-dir needs a value}
  shift 2
fi

load_pids=()
stop_load() {
  if ((${#load_pids[@]})); then
    kill "${load_pids[@]}" 2>/dev/null || true
    wait "${load_pids[@]}" 2>/dev/null || true
  fi
  load_pids=()
}
trap stop_load EXIT

cores=$(nproc)
for ((i = 0; i < cores; i++)); do
  (while :; do :; done) &
  load_pids+=($!)
done
echo "run_loaded_e2e: ${cores} busy loops started on ${cores} host cores (pids ${load_pids[*]})"
sleep 1
echo "run_loaded_e2e: load average $(cut -d' ' -f1-3 /proc/loadavg) with the loops running"

status=0
rm -rf "$out_dir"
SOFTROCE_KERNELS=${SOFTROCE_LOADED_KERNELS:-trixie} SOFTROCE_GUEST=e2e \
  "$here/run_ci_stage.sh" --out-dir "$out_dir" "$@" || status=$?
echo "run_loaded_e2e: load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
stop_load
exit "$status"
