#!/usr/bin/env bash
# Self-test of run_vm.sh: every exit path, with tiny guest scripts.
#
#   ci/softroce/selftest.sh [--keep]
#
# Checks that a pass, a failure, a guest-side infrastructure failure, a guest
# kernel panic, a hang (timeout), SIGTERM and SIGKILL to the runner, a missing
# kernel, a qemu that cannot start and a bad invocation each give their exit
# status, and that no qemu survives any of them. Takes about two minutes (six
# VM boots). Prints one line per case and exits 1 if any case failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
runner="$here/run_vm.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/softroce-selftest.XXXXXX")
if [[ "${1:-}" == --keep ]]; then
  echo "selftest: keeping $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi
export TMPDIR=$tmp # a SIGKILLed runner leaves its work directory behind
failures=0
kernel_dir=$("$here/fetch_kernel.sh")

guest() { # name, body: writes a guest script, prints its path
  printf '#!/usr/bin/env bash\n%s\n' "$2" >"$tmp/$1.sh"
  echo "$tmp/$1.sh"
}

qemu_pid_of() { # runner log: the qemu pid it printed, if any
  grep -o 'qemu pid [0-9]*' "$1" | head -n 1 | cut -d' ' -f3
}

# A qemu pid from a finished run must be gone (or reused by something else).
qemu_gone() {
  local pid
  pid=$(qemu_pid_of "$1")
  [[ -z "$pid" ]] && return 0
  for _ in {1..30}; do
    grep -qa qemu-system "/proc/$pid/cmdline" 2>/dev/null || return 0
    sleep 0.1
  done
  return 1
}

check() { # name, want status, got status, runner log, [extra condition message]
  local name=$1 want=$2 got=$3 log=$4 extra=${5:-}
  if [[ "$got" == "$want" ]] && qemu_gone "$log" && [[ -z "$extra" ]]; then
    printf 'PASS %-28s status %s\n' "$name" "$got"
  else
    failures=$((failures + 1))
    printf 'FAIL %-28s status %s, want %s%s%s\n' "$name" "$got" "$want" \
      "$(qemu_gone "$log" || echo '; qemu still running!')" "${extra:+; $extra}"
    tail -n 25 "$log" | sed 's/^/    | /'
  fi
}

run() { # id, description, want status, runner args...
  local id=$1 what=$2 want=$3 status=0
  shift 3
  SECONDS=0
  "$runner" --kernel-dir "$kernel_dir" --out-dir "$tmp/$id.out" "$@" >"$tmp/$id.log" 2>&1 || status=$?
  check "$what ($SECONDS s)" "$want" "$status" "$tmp/$id.log"
}

# 1. Pass: files in (an ELF whose libraries must follow, a data file), an
#    environment variable, an artifact out.
echo "hello" >"$tmp/data.txt"
# shellcheck disable=SC2016 # expanded in the guest
script=$(guest pass '
set -euo pipefail
/opt/selftest/zstd --version
[[ "$(cat /usr/local/bin/data.txt)" == hello ]]
[[ "$SELFTEST_VALUE" == "a b" ]]
echo artifact >"$ARTIFACTS/from-guest.txt"
mkdir -p "$ARTIFACTS/sub" && echo nested >"$ARTIFACTS/sub/file.txt"')
status=0
"$runner" --kernel-dir "$kernel_dir" --out-dir "$tmp/pass.out" --guest-script "$script" \
  --file "$(command -v zstd):/opt/selftest/zstd" --file "$tmp/data.txt" --env "SELFTEST_VALUE=a b" \
  --timeout 120 >"$tmp/pass.log" 2>&1 || status=$?
extra=''
[[ "$(cat "$tmp/pass.out/from-guest.txt" 2>/dev/null)" == artifact &&
  "$(cat "$tmp/pass.out/sub/file.txt" 2>/dev/null)" == nested ]] || extra="artifacts did not come back"
[[ -s "$tmp/pass.out/vm-console.log" ]] || extra="no console log"
check "pass, files, artifacts" 0 "$status" "$tmp/pass.log" "$extra"
boot=$(grep -o 'qemu start to guest script: [0-9.]*s' "$tmp/pass.log" | cut -d: -f2 || true)
echo "     (qemu start to guest script:${boot:- ?})"

# 2. The guest script's own status comes through.
run fail "test failure" 7 --guest-script "$(guest fail 'echo failing on purpose; exit 7')" --timeout 120
# 3. Status 90 from the guest (topology, modules) is infrastructure, never a test result.
run infra "guest infrastructure" 90 --guest-script "$(guest infra 'exit 90')" --timeout 120
# 4. A guest kernel panic: the VM reboots, -no-reboot ends qemu, no marker.
run panic "guest panic" 90 --guest-script "$(guest panic 'echo c >/proc/sysrq-trigger; sleep 60')" --timeout 120
# 5. A hang: killed at --timeout.
run hang "guest hang -> timeout" 91 --guest-script "$(guest hang 'sleep infinity')" --timeout 25

# 6/7. Signals to the runner once the guest script runs.
signal_case() { # name, signal, want status
  local name=$1 signal=$2 want=$3 pid status=0
  SECONDS=0
  "$runner" --kernel-dir "$kernel_dir" --out-dir "$tmp/$name.out" \
    --guest-script "$(guest "$name" 'sleep infinity')" --timeout 120 >"$tmp/$name.log" 2>&1 &
  pid=$!
  for _ in {1..600}; do
    grep -qs 'SOFTROCE_GUEST_START' "$tmp/$name.log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill "-$signal" "$pid"
  wait "$pid" 2>/dev/null || status=$?
  check "SIG$signal to runner ($SECONDS s)" "$want" "$status" "$tmp/$name.log"
}
signal_case sigterm TERM 92
signal_case sigkill KILL 137 # no trap runs: qemu dies of its parent-death signal

# 8-10. No VM at all.
run nokernel "missing kernel" 90 --kernel-dir "$tmp/no-such-kernel" --guest-script "$script"
run noqemu "qemu cannot start" 90 --guest-script "$script" --memory 99999999
run usage "bad invocation" 93 --guest-script "$script" --no-such-option

if ((failures)); then
  echo "selftest: FAIL ($failures cases)"
  exit 1
fi
echo "selftest: PASS"
