#!/usr/bin/env bash
# Puts a run_perf.sh run's bandwidth table into docs/performance.md, so that
# the figures there are a run's, never typed in: the lines between
# "<!-- rxe-bw-table:begin" and "<!-- rxe-bw-table:end" are replaced by the
# table guest_bw_table.sh makes of the run's perf_bw.csv (every repeat,
# medians, ratios) and the host's load during the run (DIR/perf_load.txt).
#
#   ci/softroce/perf_docs_table.sh DIR           # DIR: run_perf.sh's --out-dir
#   ci/softroce/perf_docs_table.sh DIR trixie    # that kernel's table instead
#
# run_perf.sh --update-docs runs it at the end of a run (the first kernel's
# table). The line under the table names the kernel when one is given.
# Exit 1 when there is no table or the page lacks the markers.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
dir=${1:?usage: perf_docs_table.sh DIR [SUITE]}
suite=${2:-}
doc="$repo/docs/performance.md"
csv="$dir/perf_bw.csv"
if [[ -n "$suite" ]]; then csv="$dir/vm/$suite/perf_bw.csv"; fi
if [[ ! -s "$csv" ]]; then
  echo "perf_docs_table: no $csv" >&2
  exit 1
fi
if ! grep -q '<!-- rxe-bw-table:begin' "$doc" || ! grep -q '<!-- rxe-bw-table:end' "$doc"; then
  echo "perf_docs_table: $doc has no rxe-bw-table markers" >&2
  exit 1
fi

block=$(mktemp)
trap 'rm -f "$block" "$doc.new"' EXIT
window=$(grep -o 'PERF_BW_WRITE_WINDOW=[0-9]*' "$dir/vm/${suite:-.}/run_vm.log" 2>/dev/null | head -1 | cut -d= -f2 || true)
"$here/guest_bw_table.sh" "$csv" "${window:-128}" >"$block"
if [[ -n "$suite" && -f "$dir/vm/$suite/run_vm.log" ]]; then
  kernel=$(grep -o 'booting [^ ]*' "$dir/vm/$suite/run_vm.log" | head -1 | cut -d' ' -f2)
  printf '\nKernel: Debian %s, %s.\n' "$suite" "${kernel:-?}" >>"$block"
fi
if [[ -s "$dir/perf_load.txt" ]]; then
  # perf_load.txt: "HH:MM:SS load1 load5 load15 running/total", every 5 s.
  awk -v cores="$(nproc)" '
    { n++; l[n] = $2 + 0; if (n == 1) first = $1; last = $1 }
    END {
      if (n == 0) exit
      for (i = 2; i <= n; i++) { t = l[i]; for (j = i - 1; j >= 1 && l[j] > t; j--) l[j + 1] = l[j]; l[j + 1] = t }
      printf "\nHost load during the run (%s-%s UTC; 1-minute load average sampled every 5 s, %d samples): min %.2f, median %.2f, max %.2f, on %d cores.\n",
        first, last, n, l[1], l[int((n + 1) / 2)], l[n], cores
    }' "$dir/perf_load.txt" >>"$block"
fi
awk -v block="$block" '
  /<!-- rxe-bw-table:begin/ { print; while ((getline line < block) > 0) print line; skip = 1; next }
  /<!-- rxe-bw-table:end/ { skip = 0 }
  !skip' "$doc" >"$doc.new"
mv "$doc.new" "$doc"
echo "perf_docs_table: $doc's bandwidth table is now $csv's"
