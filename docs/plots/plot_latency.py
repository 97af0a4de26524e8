#!/usr/bin/env python3
"""Plots one-way latency against message size from guest_perf.sh's CSV.

    python3 docs/plots/plot_latency.py [CSV] [PNG]

CSV defaults to docs/plots/rxe_latency.csv (a copy of a run's
perf_latency.csv, see docs/performance.md), PNG to docs/plots/rxe_latency.png.
Two panels, t_min and t_typical; each point is the median over the run's
repeats, the bar spans their interquartile range (a TCG guest now and then
stalls a whole run by milliseconds: min-max bars would hide the rest). Needs python3-matplotlib
(Debian package); nothing else.
"""

import csv
import os
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# tool in the CSV -> (legend, colour, marker, line style)
SERIES = [
    ("ib_send_lat", "perftest ib_send_lat (no inline on rxe)", "#444444", "s", "-"),
    ("ib_write_lat", "perftest ib_write_lat (no inline on rxe)", "#999999", "D", ":"),
    ("rdma_pingpong_inline_off", "rdma_pingpong --inline=off", "#1f77b4", "o", "-"),
    ("rdma_pingpong_inline_auto", "rdma_pingpong --inline=auto", "#d62728", "^", "--"),
    ("rdma_pingpong_inline_off_zero_copy", "rdma_pingpong --inline=off --zero_copy", "#2ca02c", "v", "-."),
]


def load(path):
    """{(tool, bytes): {"t_min_us": [...], "t_typical_us": [...]}}"""
    data = defaultdict(lambda: defaultdict(list))
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["tool"], int(row["bytes"]))
            for column in ("t_min_us", "t_typical_us"):
                data[key][column].append(float(row[column]))
    return data


def main():
    csv_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "rxe_latency.csv")
    png_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "rxe_latency.png")
    data = load(csv_path)
    sizes = sorted({size for (_, size) in data})
    repeats = max((len(v["t_min_us"]) for v in data.values()), default=0)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharey=False)
    for axis, column, title in (
        (axes[0], "t_min_us", "t_min (stable under TCG: compare this)"),
        (axes[1], "t_typical_us", "t_typical (median; moves ~2x between runs under TCG)"),
    ):
        for tool, label, colour, marker, style in SERIES:
            xs, ys, low, high = [], [], [], []
            for size in sizes:
                values = data.get((tool, size), {}).get(column)
                if not values:
                    continue
                median = statistics.median(values)
                if len(values) >= 2:
                    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
                else:
                    q1 = q3 = median
                xs.append(size)
                ys.append(median)
                low.append(median - q1)
                high.append(q3 - median)
            if xs:
                axis.errorbar(xs, ys, yerr=[low, high], label=label, color=colour,
                              marker=marker, linestyle=style, capsize=3, linewidth=1.5)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        ticks = [10, 15, 20, 30, 40, 60, 80, 100, 150, 200, 300, 500, 1000, 2000, 5000, 10000, 20000]
        low_y, high_y = axis.get_ylim()
        axis.set_yticks([t for t in ticks if low_y <= t <= high_y])
        axis.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        axis.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        axis.set_xticks(sizes)
        axis.set_xticklabels([str(s) for s in sizes])
        axis.set_xlabel("message size [bytes]")
        axis.set_ylabel("one-way latency [us]")
        axis.set_title(title, fontsize=10)
        axis.grid(True, which="major", alpha=0.3)
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle(
        "Soft-RoCE (rxe0 -> rxe1 over a veth, qemu TCG, 2 vCPUs): "
        f"rdma_transport vs perftest, median of {repeats} interleaved repeats, bars interquartile",
        fontsize=10)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    print(f"wrote {png_path}")


if __name__ == "__main__":
    main()
