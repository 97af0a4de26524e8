#!/usr/bin/env bash
# rdma_pingpong and rdma_bw on the simulator with --zero_copy and with sizes
# above the receive slot (64 KiB by default), up to 64 MiB: every size is
# checked end to end by the tools' stamps, each row says whether its size
# went eagerly or by rendezvous, and the CSV's counters agree (rendezvous_sent
# over the size's warm-up and measured messages).
#
#   tools/zero_copy_test.sh path/to/rdma_pingpong path/to/rdma_bw
set -uo pipefail
pingpong=${1:?usage: zero_copy_test.sh RDMA_PINGPONG RDMA_BW}
bw=${2:?usage: zero_copy_test.sh RDMA_PINGPONG RDMA_BW}
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/cli_expect.sh"
tmp=${TEST_TMPDIR:-/tmp}
# rdma_bw runs in virtual time (--virtual_time): its deadlines are the
# fabric's, whatever the host's load. rdma_pingpong has no virtual time: its
# per-step bound is raised from 10 s to 600 s (under ASan on a loaded 2-core
# host 64 MiB messages took more than 10 s; a hang still ends the test).
pingpong_bound=--timeout=600

# csv_is NAME FILE OP BYTES FIELD WANT: the row of FILE for OP ("-": any) and
# BYTES has FIELD = WANT (columns by the header's names).
csv_is() {
  local name=$1 file=$2 op=$3 bytes=$4 field=$5 want=$6 got
  got=$(awk -F, -v op="$op" -v bytes="$bytes" -v field="$field" '
    NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
    (op == "-" || $col["op"] == op) && $col["bytes"] == bytes { print $col[field] }
  ' "$file")
  if [[ "$got" == "$want" ]]; then
    echo "ok   $name"
  else
    echo "FAIL $name: $field of $op $bytes B in $file is \"$got\", want \"$want\""
    failures=$((failures + 1))
  fi
}

# Latency, zero copy: 8 B inline and 4 KiB eagerly (borrowed slots), 1 MiB
# by rendezvous into a registered region; default counts shrink above 64 KiB
# (1000 * 64 KiB / 1 MiB = 62 measured, 6 warm-up).
csv="$tmp/pingpong_zero_copy.csv"
expect "pingpong --zero_copy" 0 "messages +: zero copy .*slot 65536 B, larger ones by rendezvous" -- \
  "$pingpong" "$pingpong_bound" --self --zero_copy --sizes=8,4096,1048576 --csv="$csv"
expect_line "pingpong --zero_copy 8 B inline, eager" "^ +8 +1000 .* yes +eager$"
expect_line "pingpong --zero_copy 4 KiB eager" "^ +4096 +1000 .* no +eager$"
expect_line "pingpong --zero_copy 1 MiB by rendezvous" "^ 1048576 +62 .* no +rndv$"
csv_is "pingpong 1 MiB: rendezvous_sent" "$csv" - 1048576 rendezvous_sent 68
csv_is "pingpong 1 MiB: rendezvous_received" "$csv" - 1048576 rendezvous_received 68
csv_is "pingpong 4 KiB: rendezvous_sent" "$csv" - 4096 rendezvous_sent 0
csv_is "pingpong zero_copy column" "$csv" - 4096 zero_copy yes

# Copying, the same sizes: Send()/Receive() take 1 MiB too, by rendezvous;
# counts given on the command line hold for every size.
expect "pingpong copying" 0 "messages +: copied \(Send, Receive\)" -- \
  "$pingpong" "$pingpong_bound" --self --sizes=8,1048576 --iterations=15 --warmup=2
expect_line "pingpong copying 8 B eager" "^ +8 +15 .* yes +eager$"
expect_line "pingpong copying 1 MiB by rendezvous, 15 iterations" "^ 1048576 +15 .* no +rndv$"

# The server answers before it checks the ping (the check is off the timed
# path), and a wrong ping still fails the run: with zero copy the echo
# carries the server's own stamp, so the client learns of it from the ERR
# that follows; copying, the echo carries the wrong stamp back.
expect "pingpong --zero_copy: a wrong ping fails the run" 1 \
  "the server: ERR size 64, iteration 5: the ping has 64 bytes and a wrong stamp" -- \
  "$pingpong" "$pingpong_bound" --self --zero_copy --sizes=64,8 --iterations=20 --warmup=2 --test_bad_ping=5
expect "pingpong copying: a wrong ping fails the run" 1 \
  "size 64, iteration 5: the echo has 64 bytes and a wrong stamp" -- \
  "$pingpong" "$pingpong_bound" --self --sizes=64,8 --iterations=20 --warmup=2 --test_bad_ping=5
expect "pingpong: --test_bad_ping past the run changes nothing" 0 "^ +64 +20 " -- \
  "$pingpong" "$pingpong_bound" --self --zero_copy --sizes=64 --iterations=20 --warmup=2 --test_bad_ping=22

# A smaller slot: 4 KiB goes by rendezvous.
expect "pingpong --slot_bytes=1024" 0 "^ +4096 +20 .* rndv$" -- \
  "$pingpong" "$pingpong_bound" --self --zero_copy --slot_bytes=1024 --sizes=512,4096 --iterations=20
expect_line "pingpong --slot_bytes=1024: 512 B eager" "^ +512 +20 .* eager$"

# 64 MiB, zero copy, default counts: 10 measured round trips.
expect "pingpong 64 MiB" 0 "^67108864 +10 .* no +rndv$" -- \
  "$pingpong" "$pingpong_bound" --self --zero_copy --sizes=67108864

# Bandwidth, zero copy: the SEND rows say eager / rndv, the CSV counts
# rendezvous (1 MiB: 312 timed + 31 warm-up), and WRITE runs beside them.
# SEND by the window of PostSendFrom() (the default --send_mode): 128
# messages outstanding, each from a slot of its own.
csv="$tmp/bw_zero_copy.csv"
expect "bw --zero_copy" 0 "messages +: SEND zero copy .*slot 65536 B" -- \
  "$bw" --self --virtual_time --zero_copy --sizes=8,4096,1048576 --csv="$csv"
expect_line "bw --zero_copy: the SEND window" "window +: SEND 128 messages outstanding \(PostSendFrom on an engine\)"
expect_line "bw --zero_copy 8 B eager" "^ 8 +5000 .* eager .*of the 400 Gb/s link$"
expect_line "bw --zero_copy 4 KiB eager" "^ 4096 +5000 .* eager .*of the 400 Gb/s link$"
expect_line "bw --zero_copy 1 MiB by rendezvous" "^ 1048576 +312 .* rndv .*of the 400 Gb/s link$"
csv_is "bw 1 MiB SEND: rendezvous_sent" "$csv" send 1048576 rendezvous_sent 343
csv_is "bw 4 KiB SEND: rendezvous_sent" "$csv" send 4096 rendezvous_sent 0
csv_is "bw 1 MiB SEND: path" "$csv" send 1048576 path rndv
csv_is "bw 1 MiB WRITE: path" "$csv" write 1048576 path -
csv_is "bw 1 MiB WRITE: ring of 128" "$csv" write 1048576 window 128
csv_is "bw 1 MiB SEND: window mode" "$csv" send 1048576 send_mode window
csv_is "bw 1 MiB SEND: ring of 128" "$csv" send 1048576 window 128
csv_is "bw 8 B SEND: window mode" "$csv" send 8 send_mode window

# The SEND window smaller than the credits need: --window=4 is 4 slots and
# 4 credits, two kept in reserve, so posts are refused for want of a
# credit (kResourceExhausted) and wait for the engine; each slot is reused
# many times (every message's stamps checked by the server: a wrong one
# fails the run). Eager, eager from a slot, and rendezvous.
csv="$tmp/bw_window_4.csv"
expect "bw SEND window of 4" 0 "window +: SEND 4 messages outstanding" -- \
  "$bw" --self --virtual_time --zero_copy --op=send --window=4 \
  --sizes=8,40000,300000 --slot_bytes=65536 --iterations=60 --warmup=7 --csv="$csv"
expect_line "bw SEND window of 4: 300000 B by rendezvous" "^ 300000 +60 .* rndv .*of the 400 Gb/s link$"
expect_line "bw SEND window of 4: 40000 B eager" "^ 40000 +60 .* eager .*of the 400 Gb/s link$"
csv_is "bw SEND window of 4: rendezvous_sent" "$csv" send 300000 rendezvous_sent 67
csv_is "bw SEND window of 4: ring" "$csv" send 300000 window 4

# The blocking SendFrom() is still there (--send_mode=blocking), one
# message at a time.
csv="$tmp/bw_blocking.csv"
expect "bw SEND blocking" 0 "window +: SEND one message at a time \(SendFrom, --send_mode=blocking\)" -- \
  "$bw" --self --virtual_time --zero_copy --op=send --send_mode=blocking \
  --sizes=8,1048576 --iterations=20 --warmup=2 --csv="$csv"
expect_line "bw SEND blocking 1 MiB by rendezvous" "^ 1048576 +20 .* rndv .*of the 400 Gb/s link$"
csv_is "bw SEND blocking: send_mode" "$csv" send 1048576 send_mode blocking
csv_is "bw SEND blocking: rendezvous_sent" "$csv" send 1048576 rendezvous_sent 22

# Copying SEND above the slot, counts given.
csv="$tmp/bw_copy.csv"
expect "bw copying 1 MiB" 0 "^ 1048576 +20 .* rndv .*of the 400 Gb/s link$" -- \
  "$bw" --self --virtual_time --op=send --sizes=1048576 --iterations=20 --warmup=2 --csv="$csv"
csv_is "bw copying: send_mode" "$csv" send 1048576 send_mode copy

# 64 MiB SEND (zero copy, the window) and WRITE: 10 each; each ring is 4
# slots (256 MiB at most).
csv="$tmp/bw_64m.csv"
expect "bw 64 MiB SEND" 0 "^ 67108864 +10 .* rndv .*of the 400 Gb/s link$" -- \
  "$bw" --self --virtual_time --zero_copy --sizes=67108864 --csv="$csv"
csv_is "bw 64 MiB WRITE: ring of 4" "$csv" write 67108864 window 4
csv_is "bw 64 MiB SEND: ring of 4" "$csv" send 67108864 window 4
csv_is "bw 64 MiB SEND: window mode" "$csv" send 67108864 send_mode window
csv_is "bw 64 MiB WRITE: 10 iterations" "$csv" write 67108864 iterations 10

finish
