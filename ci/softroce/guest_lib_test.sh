#!/usr/bin/env bash
# Test of guest_lib.sh's capture helpers on the host, without a VM or
# tcpdump: stop_capture against a stand-in that answers SIGUSR1 with
# tcpdump's statistics lines, and judge_tos on every outcome of a capture
# (complete, a late packet left unread at the stop, a ring block the kernel
# never retires until filler fills it, kernel drops, a capture that never went
# quiet, a pcap short of what the filter took, a wrong TOS).
#
#   ci/softroce/guest_lib_test.sh
#
# Takes about twenty seconds. Prints one line per case; exits 1 if any failed.
set -euo pipefail

# Started in the background of a non-interactive shell (nohup cmd &, a CI
# runner's job), bash inherits SIGINT ignored and cannot trap it, and the
# stand-in below answers SIGINT: run with the default disposition.
if [[ -z "${GUEST_LIB_TEST_SIGNALS_RESET:-}" ]]; then
  GUEST_LIB_TEST_SIGNALS_RESET=1 exec env --default-signal=INT "$BASH" "$0" "$@"
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$(mktemp -d "${TMPDIR:-/tmp}/guest-lib-test.XXXXXX")
trap 'rm -rf "$out"' EXIT
IP_A=10.10.0.1
IP_B=10.10.0.2
summary="$out/summary.txt"
# shellcheck source=ci/softroce/guest_lib.sh
source "$here/guest_lib.sh"
failures=0 # guest_lib's report() counts FAILs here; the cases keep their own
case_failures=0

# tcpdump's statistics, as it prints them at SIGUSR1 and at exit.
stats() { # captured, received by filter, dropped by kernel
  printf '%s packets captured\n%s packets received by filter\n%s packets dropped by kernel\n' "$@"
}

# A stand-in for tcpdump: answers every SIGUSR1 with the next line of
# $out/<name>.script ("captured seen dropped"; the last one repeats) and
# SIGINT with the line after that. Once stop_capture has sent filler (the
# file <name>.filled exists), it answers from <name>.after-filler instead.
fake_capture() { # name
  local name=$1
  : >"$out/$name.tcpdump.txt"
  (
    line=1 script=$out/$name.script
    # shellcheck disable=SC2317 # run by the traps
    answer() {
      local n
      if [[ -e "$out/$name.filled" && "$script" != *.after-filler ]]; then
        script=$out/$name.after-filler line=1
      fi
      n=$(wc -l <"$script")
      # shellcheck disable=SC2046 # the line's three counts, split
      stats $(sed -n "$((line < n ? line : n))p" "$script") >>"$out/$name.tcpdump.txt"
      line=$((line + 1))
    }
    trap answer USR1
    if [[ "${STAND_IN_IGNORES_INT:-0}" == 1 ]]; then
      trap '' INT
    else
      trap 'answer; exit 0' INT
    fi
    while :; do sleep 0.05; done
  ) &
  capture_pid=$!
  capture_name=$name
  sleep 0.2 # the traps are set
}

# judge_tos's input: tos_counts (the pcap census) replaced by a fixed answer.
census=''
tos_counts() { echo "$census"; }

# The filler stop_capture sends: recorded for the stand-in, not sent.
send_fillers() { echo "$1" >>"$out/$capture_name.filled"; }

expect() { # case, want PASS|FAIL, want text (grep -E) in the report
  local name=$1 want=$2 text=$3 got
  got=$(tail -n 1 "$summary")
  if [[ "$got" == "$want "* && "$got" =~ $text ]]; then
    printf 'PASS %-40s judged %s, as it should\n' "$name" "${want,,}"
  else
    case_failures=$((case_failures + 1))
    printf 'FAIL %-40s got: %s\n     want: %s ... %s\n' "$name" "$got" "$want" "$text"
  fi
}

# One case: tcpdump's answers (one "captured seen dropped" line each, $2,
# newline-separated; $AFTER_FILLER, the answers once filler was sent), the
# pcap's census, whether the run passed, and what the judge must say.
# $STAND_IN_DIES=1: the stand-in is killed after 2 s (a tcpdump that stopped
# reading; stop_capture gives up when it is gone).
judge_case() { # case, answers, census, run_ok, run, want PASS|FAIL, want text
  local name=$1 file=${1// /_}
  printf '%s\n' "$2" >"$out/$file.script"
  printf '%s\n' "${AFTER_FILLER:-$2}" >"$out/$file.after-filler"
  fake_capture "$file"
  if [[ "${STAND_IN_DIES:-0}" == 1 ]]; then
    (sleep 2 && kill -KILL "$capture_pid") &
  fi
  stop_capture 2>/dev/null
  census=$3
  judge_tos "TOS tc136" "$file" 0x88 4000 "$4" "$5" >/dev/null
  expect "$name" "$6" "$7"
}

# Traffic settles; the stop finds every packet written.
judge_case "complete capture" $'3000 4000 0\n4000 4000 0\n4000 4000 0' \
  '4000 4000 2000 2000 0 0x88=4000' 1 "tclass 136" \
  PASS '4000/4000 RoCE packets with IP TOS 0x88 \(2000 10.10.0.1->10.10.0.2, 2000 back'
[[ "$capture_quiet_seen" == 4000 ]] || { case_failures=$((case_failures + 1)); echo "FAIL quiet count $capture_quiet_seen, want 4000"; }

# The CI failure of c4d9762 (6.1): one packet arrives after the capture
# went quiet and is still in the ring at SIGINT. Not a loss of the run's.
judge_case "late packet after the quiet point" $'4000 4000 0\n4000 4000 0\n4000 4001 0' \
  '4000 4000 2000 2000 0 0x88=4000' 1 "tclass 136" \
  PASS '\(1 matched after the capture went quiet at 4000, left unread at its stop\)'

# The 7.2 failure of ca3e292: two packets taken by the filter sit in a ring
# block the kernel never retires. Filler fills it until tcpdump has written
# the 4002; the last 64 of the filler stay in the ring (not late packets).
AFTER_FILLER=$'4000 4066 0\n4066 4130 0' judge_case "block never retired, filler flushes it" \
  '4000 4002 0' '4002 4002 2001 2001 64 0x88=4002' 1 "tclass 136" \
  PASS '4002/4002 RoCE packets .*TOS seen: 0x88=4002\) \(the kernel held the capture.s last block: flushed with 128 filler datagrams, 64 in the pcap\)$'
[[ "$capture_quiet_seen" == 4002 ]] || { case_failures=$((case_failures + 1)); echo "FAIL quiet count $capture_quiet_seen, want 4002"; }

# The kernel dropped packets: the capture is a sample, not the run (and the
# stop does not wait out its bound for them).
judge_case "kernel drops" '3990 4000 10' '3990 3990 1995 1995 0 0x88=3990' 1 "tclass 136" \
  FAIL 'capture incomplete \(4000 matched, 4000 when quiet, 3990 captured, 0 filler, 10 dropped'

STAND_IN_DIES=1 judge_case "capture never quiet" '100 4000 0' '100 100 50 50 0 0x88=100' 1 "tclass 136" \
  FAIL 'capture incomplete \(4000 matched, never quiet, 100 captured'

# The pcap holds fewer packets than were written at the quiet point.
judge_case "pcap short of the quiet count" '4000 4000 0' '3999 3999 2000 1999 0 0x88=3999' 1 "tclass 136" \
  FAIL 'capture incomplete \(4000 matched, 4000 when quiet, 3999 captured'

# Complete, but fewer packets than the run sent (ib_send_lat -n 1000: 4000).
judge_case "fewer packets than the run's" '3999 3999 0' '3999 3999 2000 1999 0 0x88=3999' 1 "tclass 136" \
  FAIL '3999/3999 RoCE packets with IP TOS 0x88'

# Complete, but one packet carries another TOS.
judge_case "one packet with another TOS" '4000 4000 0' '4000 3999 2000 2000 0 0x88=3999 0x0=1' 1 "tclass 136" \
  FAIL '3999/4000 RoCE packets with IP TOS 0x88'

# The run itself failed: FAIL whatever the capture holds.
judge_case "failed run" '4000 4000 0' '4000 4000 2000 2000 0 0x88=4000' 0 "tclass 136, ib_send_lat failed (status 1)" \
  FAIL 'ib_send_lat failed \(status 1\)'

# A capture that ignores SIGINT: the stop kills it after CAPTURE_STOP_WAIT
# seconds instead of waiting for ever (it hung a loaded run for 22 minutes).
printf '4000 4000 0\n' >"$out/ignores_int.script"
STAND_IN_IGNORES_INT=1 fake_capture ignores_int
started=$SECONDS
CAPTURE_STOP_WAIT=1 stop_capture 2>"$out/stop_note" >/dev/null
stop_note=$(<"$out/stop_note")
if ((SECONDS - started <= 5)) && [[ "$stop_note" == *"still ran 1 s after SIGINT; killed"* ]] &&
  ! kill -0 "$capture_pid" 2>/dev/null; then
  printf 'PASS %-40s stopped in %d s: %s\n' "capture ignoring SIGINT" "$((SECONDS - started))" "$stop_note"
else
  case_failures=$((case_failures + 1))
  printf 'FAIL %-40s after %d s, said: %s\n' "capture ignoring SIGINT" "$((SECONDS - started))" "$stop_note"
fi

if ((case_failures)); then
  echo "guest_lib_test: FAIL ($case_failures cases)"
  exit 1
fi
echo "guest_lib_test: PASS"
