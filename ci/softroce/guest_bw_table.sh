#!/usr/bin/env bash
# The bandwidth table of docs/performance.md, in Markdown, from guest_perf.sh's
# perf_bw.csv: per size and operation, each repeat's Gb/s average (rN: repeat
# N; a failed run has none), the medians and the ratio of the medians. The
# zero-copy SEND rows (rdma_bw_send_zero_copy, the window; and
# rdma_bw_send_zero_copy_blocking) and the blocking WRITE rows appear when
# the CSV has them, each against the same perftest runs as its op.
# Run by guest_perf.sh in the VM and by perf_docs_table.sh on the host.
#
#   guest_bw_table.sh perf_bw.csv [WRITE_WINDOW]   # the window, for the label
set -euo pipefail
csv=${1:?usage: guest_bw_table.sh perf_bw.csv [WRITE_WINDOW]}
window=${2:-128}
awk -F, -v window="$window" '
    function median(list,   n, a, i, j, t) {
      n = split(list, a, " ")
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
      return n == 0 ? 0 : n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function cell(key) { return (key in d) ? d[key] : "n/a" }
    FNR > 1 {
      if ($1 + 0 > repeats) repeats = $1 + 0; iters = $4
      k = $2 SUBSEP $3; v[k] = v[k] " " $6; size[$2] = 1
      sep = (k in d) ? ", " : ""; d[k] = d[k] sep "r" $1 " " sprintf("%.3f", $6)
    }
    END {
      printf "| bytes | op | perftest, each repeat | perftest median | rdma_bw, each repeat | rdma_bw median | ours / perftest |\n"
      printf "| ---: | --- | --- | ---: | --- | ---: | ---: |\n"
      n = 0; for (s in size) sorted[++n] = s + 0
      for (i = 2; i <= n; i++) { t = sorted[i]; for (j = i - 1; j >= 1 && sorted[j] > t; j--) sorted[j + 1] = sorted[j]; sorted[j + 1] = t }
      # Rows 2, 3 and 5 are optional (PERF_ZERO_COPY, PERF_BW_BLOCKING):
      # shown when the run has them.
      split("ib_send_bw ib_send_bw ib_send_bw ib_write_bw ib_write_bw", theirs, " ")
      split("rdma_bw_send rdma_bw_send_zero_copy rdma_bw_send_zero_copy_blocking rdma_bw_write rdma_bw_write_blocking", ours, " ")
      split("SEND|SEND, zero copy (`--zero_copy`, window 128)|SEND, zero copy, blocking (`--send_mode=blocking`)|WRITE, window " window "|WRITE, blocking (`--write_mode=blocking`)", labels, "|")
      for (i = 1; i <= n; i++) {
        for (o = 1; o <= 5; o++) {
          p = sorted[i] SUBSEP theirs[o]; q = sorted[i] SUBSEP ours[o]
          if (!(q in v) && !(p in v)) continue
          if ((o == 2 || o == 3 || o == 5) && !(q in v)) continue
          pm = (p in v) ? median(v[p]) : 0; qm = (q in v) ? median(v[q]) : 0
          printf "| %d | %s | %s | %s | %s | %s | %s |\n", sorted[i], labels[o], cell(p),
            (pm > 0 ? sprintf("%.3f", pm) : "n/a"), cell(q),
            (qm > 0 ? sprintf("%.3f", qm) : "n/a"),
            (pm > 0 && qm > 0 ? sprintf("**%.2fx**", qm / pm) : "n/a")
        }
      }
      printf "\nGb/s average (`--report_gbits`), %d iterations a run, %d interleaved repeats; n/a: every run of it failed (see the run'"'"'s perf-raw/).\n", iters, repeats
    }' "$csv"
