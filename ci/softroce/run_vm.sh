#!/usr/bin/env bash
# Runs a guest script in a throw-away Soft-RoCE VM (qemu TCG, Debian's kernel).
#
#   ci/softroce/run_vm.sh --guest-script FILE --out-dir DIR
#       [--file HOST[:GUEST]]...  host file or directory to copy in (default
#                                 GUEST: /usr/local/bin/<basename>); libraries
#                                 of ELF files are added automatically
#       [--env NAME=VALUE]...     exported to the guest script
#       [--module NAME]...        extra kernel module to load (with its deps)
#       [--timeout SECONDS]       hard wall-clock limit for the VM (default 600)
#       [--memory MB] [--smp N]   VM size (default 1024 MB, 2 CPUs)
#       [--kernel-dir DIR]        a fetch_kernel.sh cache entry (default: fetch it)
#
# $SOFTROCE_KERNEL_ARGS, if set, is added to the guest kernel's command line
# (run_perf.sh --kernel-args: "tsc=reliable" keeps the guest on the TSC
# clocksource, which TCG's timing otherwise gets marked unstable mid-run).
#
# The guest script runs as root in /artifacts with the topology helpers in
# $SOFTROCE_DIR (see guest_topology.sh). The console streams to stdout and to
# DIR/vm-console.log, the runner's own lines to DIR/run_vm.log; whatever the
# guest leaves in /artifacts is copied to DIR.
#
# Exit status, so that a broken VM is never read as a test result:
#    0      the guest script passed
#    1..89  the guest script failed with this status (also 100..255)
#   89      the guest script exited 91..99, which are reserved here
#   90      VM infrastructure failure: no kernel, qemu failed, guest panic,
#           modules or topology (a guest script exiting 90), no result marker,
#           artifacts lost
#   91      timeout: the VM ran past --timeout and was killed
#   92      interrupted: the runner got SIGINT/SIGTERM/SIGHUP and killed the VM
#   93      bad invocation
# qemu never outlives the runner: it is killed on every exit path, and it gets
# SIGKILL from the kernel should the runner itself be SIGKILLed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly EXIT_INFRA=90 EXIT_TIMEOUT=91 EXIT_INTERRUPTED=92 EXIT_USAGE=93
readonly POWEROFF_GRACE=15 # seconds from the result marker to qemu's exit

run_log='' # DIR/run_vm.log once the out dir exists
log() {
  echo "run_vm: $*" >&2
  if [[ -n "$run_log" ]]; then echo "run_vm: $*" >>"$run_log"; fi
}
usage_error() { log "error: $*"; sed -n '3,16p' "$0" >&2; exit "$EXIT_USAGE"; }
infra_fail() { log "INFRASTRUCTURE FAILURE: $*"; exit "$EXIT_INFRA"; }

guest_script='' out_dir='' kernel_dir='' timeout=600 memory=1024 smp=2
build_args=()
while (($#)); do
  case "$1" in
    --guest-script|--out-dir|--file|--env|--module|--timeout|--memory|--smp|--kernel-dir)
      (($# >= 2)) || usage_error "$1 needs a value" ;;&
    --guest-script) guest_script=$2 ;;
    --out-dir) out_dir=$2 ;;
    --file|--env|--module) build_args+=("$1" "$2") ;;
    --timeout) timeout=$2 ;;
    --memory) memory=$2 ;;
    --smp) smp=$2 ;;
    --kernel-dir) kernel_dir=$2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) usage_error "unknown argument: $1" ;;
  esac
  shift 2
done
[[ -n "$guest_script" ]] || usage_error "--guest-script is required"
[[ -f "$guest_script" ]] || usage_error "--guest-script $guest_script: no such file"
[[ -n "$out_dir" ]] || usage_error "--out-dir is required"
for number in "$timeout" "$memory" "$smp"; do
  [[ "$number" =~ ^[1-9][0-9]*$ ]] || usage_error "not a positive integer: $number"
done

qemu_pid='' tail_pid='' work=''
# shellcheck disable=SC2317 # cleanup and on_signal run from traps
cleanup() {
  local status=$?
  trap - EXIT INT TERM HUP
  if [[ -n "$qemu_pid" ]] && kill -0 "$qemu_pid" 2>/dev/null; then
    log "killing qemu (pid $qemu_pid)"
    # qemu leads its own process group (setsid): end the whole group.
    kill -TERM -- "-$qemu_pid" 2>/dev/null || kill -TERM "$qemu_pid" 2>/dev/null || true
    for _ in {1..30}; do
      kill -0 "$qemu_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL -- "-$qemu_pid" 2>/dev/null || kill -KILL "$qemu_pid" 2>/dev/null || true
    wait "$qemu_pid" 2>/dev/null || true
  fi
  if [[ -n "$tail_pid" ]]; then
    kill "$tail_pid" 2>/dev/null || true
    wait "$tail_pid" 2>/dev/null || true
  fi
  if [[ -n "$work" ]]; then rm -rf "$work"; fi
  exit "$status"
}
# shellcheck disable=SC2317
on_signal() {
  log "INTERRUPTED by SIG$1: stopping the VM"
  exit "$EXIT_INTERRUPTED"
}
trap cleanup EXIT
for signal in INT TERM HUP; do
  # shellcheck disable=SC2064 # bind the signal name now
  trap "on_signal $signal" "$signal"
done

for tool in qemu-system-x86_64 setsid setpriv cpio tar truncate; do
  command -v "$tool" >/dev/null || infra_fail "$tool not found (run ci/install_deps.sh vm)"
done
mkdir -p "$out_dir" || usage_error "cannot create --out-dir $out_dir"
out_dir=$(cd "$out_dir" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/softroce-vm.XXXXXX")
console="$out_dir/vm-console.log"
run_log="$out_dir/run_vm.log"
: >"$run_log"
run_id=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')

if [[ -z "$kernel_dir" ]]; then
  kernel_dir=$("$here/fetch_kernel.sh") || infra_fail "cannot fetch the kernel (see fetch_kernel output above)"
fi
[[ -f "$kernel_dir/complete" && -f "$kernel_dir/vmlinux" ]] ||
  infra_fail "kernel directory $kernel_dir has no vmlinux (run ci/softroce/fetch_kernel.sh)"

"$here/build_initramfs.sh" --kernel-dir "$kernel_dir" --guest-script "$guest_script" \
  --run-id "$run_id" --output "$work/initramfs.cpio" ${build_args[@]+"${build_args[@]}"} ||
  infra_fail "cannot build the initramfs"

# Artifact disk: the guest writes a tar of /artifacts onto it (sparse file).
truncate -s "${SOFTROCE_ARTIFACT_DISK_MB:-1024}M" "$work/artifacts.img"

# shellcheck disable=SC2054 # the commas belong to qemu's option syntax
qemu_args=(
  -name softroce -machine q35 -accel tcg,thread=multi -cpu max -smp "$smp" -m "$memory"
  -nic none -display none -vga none -monitor none -serial stdio -no-reboot
  -kernel "$kernel_dir/vmlinux" -initrd "$work/initramfs.cpio"
  -append "console=ttyS0 panic=-1 quiet${SOFTROCE_KERNEL_ARGS:+ $SOFTROCE_KERNEL_ARGS}"
  -drive "file=$work/artifacts.img,format=raw,if=virtio,cache=unsafe"
)
log "booting $(basename "$kernel_dir") (run $run_id, timeout ${timeout}s); console -> $console"
: >"$console"
start=$SECONDS
start_ns=$(date +%s%N)
# Own process group (setsid) so that cleanup can end all of it; parent-death
# signal so that qemu dies with the runner even on SIGKILL.
setsid setpriv --pdeathsig KILL -- qemu-system-x86_64 "${qemu_args[@]}" \
  </dev/null >"$console" 2>"$work/qemu.stderr" &
qemu_pid=$!
log "qemu pid $qemu_pid"
tail -n +1 -f --pid="$qemu_pid" "$console" &
tail_pid=$!

marker() { # prints the value of marker $1 of this run, if the guest printed it
  { LC_ALL=C grep -a -o -m 1 "$1=[^ ]* run=$run_id" "$console" || true; } |
    sed 's/=/ /; s/ run=.*//' | cut -d' ' -f2
}

timed_out=0 result='' result_at=0 guest_started=''
while kill -0 "$qemu_pid" 2>/dev/null; do
  sleep 0.25
  if [[ -z "$guest_started" ]] && LC_ALL=C grep -aq "SOFTROCE_GUEST_START run=$run_id" "$console"; then
    guest_started=$(( ($(date +%s%N) - start_ns) / 1000000 ))
  fi
  if [[ -z "$result" ]]; then
    result=$(marker SOFTROCE_RESULT)
    if [[ -n "$result" ]]; then result_at=$SECONDS; fi
  elif ((SECONDS - result_at > POWEROFF_GRACE)); then
    log "guest reported its result but did not power off within ${POWEROFF_GRACE}s; killing qemu"
    break
  fi
  if ((SECONDS - start >= timeout)); then
    timed_out=1
    break
  fi
done
if kill -0 "$qemu_pid" 2>/dev/null; then
  kill -KILL -- "-$qemu_pid" 2>/dev/null || kill -KILL "$qemu_pid" 2>/dev/null || true
fi
qemu_status=0
wait "$qemu_pid" 2>/dev/null || qemu_status=$?
qemu_pid=''
wait "$tail_pid" 2>/dev/null || true
tail_pid=''
elapsed=$((SECONDS - start))
[[ -n "$result" ]] || result=$(marker SOFTROCE_RESULT)
if [[ -n "$guest_started" ]]; then
  log "qemu start to guest script: $((guest_started / 1000)).$(printf '%03d' $((guest_started % 1000)))s"
fi
if [[ -s "$work/qemu.stderr" ]]; then
  log "qemu stderr:"
  sed 's/^/  /' "$work/qemu.stderr" >&2
fi

if [[ -z "$result" ]]; then
  if ((timed_out)); then
    log "TIMEOUT: the VM ran for ${elapsed}s, past --timeout ${timeout}s, and was killed"
    exit "$EXIT_TIMEOUT"
  fi
  if reason=$(marker SOFTROCE_INFRA) && [[ -n "$reason" ]]; then
    infra_fail "guest init: ${reason//_/ }"
  fi
  if LC_ALL=C grep -aq 'Kernel panic' "$console"; then
    infra_fail "the guest kernel panicked: $(LC_ALL=C grep -a -m 1 'Kernel panic' "$console" | tr -d '\r')"
  fi
  infra_fail "qemu exited (status $qemu_status) after ${elapsed}s without a result marker"
fi

if [[ -n "$(marker SOFTROCE_ARTIFACTS)" ]]; then
  tar -C "$out_dir" -xf "$work/artifacts.img" || infra_fail "cannot unpack the guest's artifacts"
else
  infra_fail "the guest script exited $result but its artifacts did not come back"
fi

if ((result == 0)); then
  log "PASS: guest script exited 0 after ${elapsed}s"
  exit 0
elif ((result == EXIT_INFRA)); then
  infra_fail "guest script reported an infrastructure failure (status 90) after ${elapsed}s"
elif ((result > EXIT_INFRA && result < 100)); then
  log "FAIL: guest script exited $result (reserved; reported as 89) after ${elapsed}s"
  exit 89
else
  log "FAIL: guest script exited $result after ${elapsed}s"
  exit "$result"
fi
