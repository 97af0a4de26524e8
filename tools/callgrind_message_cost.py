#!/usr/bin/env python3
"""Instructions per message from a callgrind profile: the caller's own.

Reads a callgrind output file (callgrind --toggle-collect=<entry>... so that
only the message calls are counted) and prints, for each group of entry
functions, the instructions they executed per call of the group's first
entry, with and without what they spent in the verbs backend (every call
into a function whose name matches --verbs, by default the simulator's
SimVerbs: the work the NIC's provider would do, not the transport's).

  callgrind_message_cost.py callgrind.out \
      --group transport=rdma_transport::Connection::Send,rdma_transport::Connection::Receive \
      --group raw=rdma_transport::RawQpPair::Message

prints one line per group:

  transport own 614.1 verbs 4389.5 made 5.06 calls 2768
  raw own 192.0 verbs 4800.3 made 6.00 calls 2768

`own` is what the group's functions (and whatever they called) executed
outside the verbs backend, per call of the group's first function (per
Send above: one message); `made` the calls that code made (into the
backend too), per call likewise; `calls` how many calls the figures are
over. Inclusive costs come from callgrind's call records (each call's
line carries its callee's inclusive cost), so the file must have them (the
default). Only the first event (Ir) is used. Exit status 1 with a message
when a group matches no function or the file has no calls into it.
"""

import argparse
import collections
import re
import sys


def parse(path):
    """Self cost per function, inclusive cost per call edge, call counts."""
    names = {}

    def name(text):
        # "(12) name" defines id 12; "(12)" refers back to it.
        match = re.match(r"\((\d+)\)(?: (.*))?$", text)
        if not match:
            return text
        if match.group(2) is not None:
            names[match.group(1)] = match.group(2)
        return names.get(match.group(1), match.group(1))

    self_cost = collections.Counter()
    edge_cost = collections.Counter()
    edge_calls = collections.Counter()
    function = None
    callee = None
    in_call = False
    with open(path) as lines:
        for line in lines:
            line = line.rstrip("\n")
            if line.startswith("fn="):
                function = name(line[3:])
            elif line.startswith("cfn="):
                callee = name(line[4:])
            elif line.startswith("calls="):
                edge_calls[(function, callee)] += int(line[6:].split()[0])
                in_call = True
            elif line and (line[0].isdigit() or line[0] in "+-*"):
                fields = line.split()
                cost = int(fields[1]) if len(fields) > 1 else 0
                if in_call:
                    edge_cost[(function, callee)] += cost
                    in_call = False
                elif function is not None:
                    self_cost[function] += cost
    return self_cost, edge_cost, edge_calls


def base_name(function):
    """The function's qualified name without its parameter list."""
    return re.sub(r"\(.*", "", function)


def group_cost(functions, verbs, self_cost, edge_cost, edge_calls):
    """(own, verbs, calls made, calls): per call into the first function."""
    entries = []
    for wanted in functions:
        found = [f for f in self_cost if base_name(f) == wanted]
        if not found:
            raise LookupError("no function %s in the profile" % wanted)
        entries += found
    first = [f for f in entries if base_name(f) == functions[0]]
    calls = sum(n for (caller, callee), n in edge_calls.items()
                if callee in first and caller not in entries)
    if calls == 0:
        raise LookupError("no calls into %s" % functions[0])
    total = sum(self_cost[f] for f in entries)
    total += sum(c for (caller, callee), c in edge_cost.items()
                 if caller in entries and callee not in entries)
    # What the entries reach without passing through the backend; the
    # calls from there into the backend are its cost, not theirs.
    reached = set(entries)
    frontier = list(entries)
    while frontier:
        caller = frontier.pop()
        for (a, b) in edge_calls:
            if a == caller and b not in reached and not verbs.search(
                    base_name(b)):
                reached.add(b)
                frontier.append(b)
    backend = sum(c for (caller, callee), c in edge_cost.items()
                  if caller in reached and verbs.search(base_name(callee)))
    # Calls made by that code (into the backend too): under qemu's TCG a
    # call and its return cost far more than their instructions.
    made = sum(n for (caller, callee), n in edge_calls.items()
               if caller in reached and callee != caller)
    return (total - backend) / calls, backend / calls, made / calls, calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("profile")
    parser.add_argument("--group", action="append", required=True,
                        metavar="NAME=FUNCTION[,FUNCTION...]",
                        help="qualified names without parameters; costs "
                        "are per call into the first")
    parser.add_argument("--verbs", default=r"::sim::SimVerbs::",
                        help="backend functions whose cost is not the "
                        "caller's own (regular expression)")
    args = parser.parse_args()
    self_cost, edge_cost, edge_calls = parse(args.profile)
    verbs = re.compile(args.verbs)
    for group in args.group:
        label, _, functions = group.partition("=")
        try:
            own, backend, made, calls = group_cost(
                functions.split(","), verbs, self_cost, edge_cost, edge_calls)
        except LookupError as error:
            print("callgrind_message_cost: %s: %s" % (label, error),
                  file=sys.stderr)
            return 1
        print("%s own %.1f verbs %.1f made %.2f calls %d" %
              (label, own, backend, made, calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
