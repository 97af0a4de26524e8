#!/bin/bash
# The tools' command lines (absl/flags): every flag listed by --help, and
# each kind of bad input refused with a message naming what was wrong and a
# non-zero exit, before anything runs.
#   bazel test //tools:flags_test
set -u
pingpong="$1"
bw="$2"
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/cli_expect.sh"

for flag in backend device peer_device profile gid_index inline tc progress thread_mode \
    server listen connect self timeout token csv json sizes iterations warmup; do
  expect "pingpong --help lists --$flag" nonzero "--$flag " -- "$pingpong" --help
done
for flag in zero_copy slot_bytes; do
  expect "pingpong --help lists --$flag" nonzero "--$flag " -- "$pingpong" --help
done
for flag in op window batch ops_per_write write_mode write_window peer_device \
    zero_copy slot_bytes send_mode; do
  expect "bw --help lists --$flag" nonzero "--$flag " -- "$bw" --help
done
expect "unknown flag" nonzero "Unknown command line flag 'bogus'" -- "$bw" --bogus
expect "the old dashed spelling" nonzero "Unknown command line flag 'peer-device'" \
  -- "$pingpong" --self --peer-device=x
expect "not an integer" nonzero "Illegal value 'x' specified for flag 'window'" \
  -- "$bw" --window=x
expect "out of range" 2 "--window must be in 2..4096" -- "$bw" --window=1
expect "positional argument" 2 'unexpected argument "stray"' -- "$bw" stray
expect "bad size list" 2 '--sizes: message size "0"' -- "$pingpong" --sizes=8,0
expect "size above 64 MiB" 2 '--sizes: message size "67108865" .* in 1..67108864' \
  -- "$bw" --sizes=8,67108865
expect "slot too small" 2 "--slot_bytes=100: want 0 \(auto\) or 512..16777216" \
  -- "$pingpong" --slot_bytes=100
expect "slot too large" 2 "--slot_bytes=16777217: want 0 \(auto\) or 512..16777216" \
  -- "$bw" --slot_bytes=16777217
expect "zero copy is a bool" nonzero "Illegal value 'yes please' specified for flag 'zero_copy'" \
  -- "$bw" "--zero_copy=yes please"
expect "bad backend" 2 "--backend=tcp: want sim or ibverbs" -- "$pingpong" --backend=tcp
expect "bad gid index" nonzero "--gid_index=two: not an integer" -- "$pingpong" --gid_index=two
expect "two modes" 2 "choose one of --server" -- "$bw" --self --server
expect "unknown profile" nonzero "cx7" -- "$pingpong" --profile=cx99
expect "a short run" 0 "inline" -- "$pingpong" --self --iterations=20 --warmup=2 --sizes=8
expect "bad write mode" 2 "--write_mode: want window or blocking" -- "$bw" --write_mode=async
expect "bad send mode" 2 "--send_mode: want window or blocking" -- "$bw" --send_mode=async
expect "bad thread mode" 2 "--thread_mode=single: want shared or serialized" \
  -- "$pingpong" --thread_mode=single
# Serialized connections (no atomic lock) on both tools: each side uses its
# connection from one thread at a time, so nothing aborts, and every message
# is checked as ever.
expect "pingpong serialized" 0 "^ +4096 +50 " \
  -- "$pingpong" --self --thread_mode=serialized --zero_copy --iterations=50 --warmup=5 --sizes=8,4096,1048576
expect "bw serialized window" 0 "^ 1048576 +" \
  -- "$bw" --self --virtual_time --thread_mode=serialized --zero_copy --iterations=50 --warmup=5 --sizes=4096,1048576
expect "write window out of range" 2 "--write_window must be in 1..4096" \
  -- "$bw" --write_window=0
# The WRITE window on the simulator: a ring of 3 slots wraps many times in
# 50 ops (each slot's stamp checked by the server), 2 sizes; and the
# blocking mode beside it. A wrong stamp fails the run (exit 1).
expect "windowed WRITE run" 0 "3 ops outstanding \(PostWrite on an engine\)" \
  -- "$bw" --self --op=write --write_window=3 --iterations=50 --warmup=7 --sizes=64,300000
expect "windowed WRITE rows" 0 "^ 300000 +50 " \
  -- "$bw" --self --op=write --write_window=3 --iterations=50 --warmup=7 --sizes=64,300000
# On the rxe profile a 1 MiB WRITE is 4 work requests (Soft-RoCE's in-flight
# cap cuts pieces): a window of 128 does not fit the send queue in one post.
expect "windowed 1 MiB WRITE on rxe" 0 "^ 1048576 +300 " \
  -- "$bw" --self --profile=rxe --op=write --iterations=300 --warmup=10 --sizes=1048576
expect "blocking WRITE run" 0 "ops per Write\(\) in chains of" \
  -- "$bw" --self --op=write --write_mode=blocking --ops_per_write=5 --iterations=50 --sizes=4096

finish
