#!/usr/bin/env python3
"""Holds the message path's own instructions to a budget.

  instruction_budget.py --budget FILE --counts CSV --compiler "g++ (...) 12.2.0"

BUDGET (tools/message_instructions_budget.txt) pins a count a message for
each path at 64 B (copy, zero_copy) and the compiler they were counted
with; CSV is what `tools/message_instructions.sh --csv` wrote. Prints each
path's budget, count and change, and exits 0 when every count is within
--tolerance (5%) over its budget, 1 when one is above it or the compilers
differ (the counts depend on the compiler: a budget for one says nothing
of another's), 2 when a file cannot be read as expected.
"""
import argparse
import csv
import sys

PATHS = {"copy": "copy", "zero copy": "zero_copy"}
SIZE = "64"


def bad(message):
    """A file that cannot be read as expected: exit 2."""
    print("instruction budget: " + message, file=sys.stderr)
    sys.exit(2)


def read_budget(path):
    compiler, budget = None, {}
    with open(path) as f:
        for number, line in enumerate(f, start=1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            key, _, value = text.partition(" ")
            value = value.strip()
            if key == "compiler":
                compiler = value
            elif key in PATHS.values():
                try:
                    budget[key] = float(value)
                except ValueError:
                    bad("%s:%d: '%s' is not a count" % (path, number, value))
            else:
                bad("%s:%d: unknown key '%s' (compiler, %s)" %
                         (path, number, key, ", ".join(PATHS.values())))
    missing = [p for p in PATHS.values() if p not in budget]
    if compiler is None or missing:
        bad("%s: needs a compiler line and a count for %s" %
                 (path, ", ".join(missing or PATHS.values())))
    return compiler, budget


def read_counts(path):
    counts = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            if row.get("bytes") == SIZE and row.get("inline") == "0" and \
                    row.get("path") in PATHS:
                counts[PATHS[row["path"]]] = float(row["transport_own"])
    missing = [p for p in PATHS.values() if p not in counts]
    if missing:
        bad("%s: no %s B count (inline off) for %s" %
                 (path, SIZE, ", ".join(missing)))
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget", required=True)
    parser.add_argument("--counts", required=True)
    parser.add_argument("--compiler", required=True,
                        help="the first line of the compiler's --version")
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args()
    compiler, budget = read_budget(args.budget)
    counts = read_counts(args.counts)
    print("%-10s %10s %10s %8s" % ("path", "budget", "count", "change"))
    over = []
    for path in PATHS.values():
        change = counts[path] / budget[path] - 1
        print("%-10s %10.1f %10.1f %+7.1f%%" %
              (path, budget[path], counts[path], 100 * change))
        if change > args.tolerance:
            over.append("%s: %.1f instructions a message is %.1f%% over the "
                        "budget of %.1f (at most %.0f%% allowed)" %
                        (path, counts[path], 100 * change, budget[path],
                         100 * args.tolerance))
    if compiler != args.compiler:
        print("instruction budget: FAIL: the budget was counted with '%s', "
              "this build's compiler is '%s'; counts differ between "
              "compilers: count with this one and set a budget for it" %
              (compiler, args.compiler))
        return 1
    if over:
        print("instruction budget: FAIL: " + "; ".join(over) + ". If the "
              "cost is worth it, raise the budget in " + args.budget +
              " with a line in docs/performance.md saying why.")
        return 1
    print("instruction budget: PASS (within %.0f%% of %s)" %
          (100 * args.tolerance, args.budget))
    return 0


if __name__ == "__main__":
    sys.exit(main())
