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
over. A profile made with --branch-sim=yes adds `branches`: the
conditional branches that code executed, per call (its own, as `own`).
Inclusive costs come from callgrind's call records (each call's line
carries its callee's inclusive cost), so the file must have them (the
default). Exit status 1 with a message when a group matches no function
or the file has no calls into it.
"""

import argparse
import collections
import re
import sys


def parse(path):
    """Event names; self cost per function and inclusive cost per call
    edge (a list per event); call counts per edge."""
    names = {}
    events = ["Ir"]

    def name(text):
        # "(12) name" defines id 12; "(12)" refers back to it.
        match = re.match(r"\((\d+)\)(?: (.*))?$", text)
        if not match:
            return text
        if match.group(2) is not None:
            names[match.group(1)] = match.group(2)
        return names.get(match.group(1), match.group(1))

    self_cost = collections.defaultdict(lambda: [0] * len(events))
    edge_cost = collections.defaultdict(lambda: [0] * len(events))
    edge_calls = collections.Counter()
    function = None
    callee = None
    in_call = False
    with open(path) as lines:
        for line in lines:
            line = line.rstrip("\n")
            if line.startswith("events:"):
                events[:] = line.split()[1:]
            elif line.startswith("fn="):
                function = name(line[3:])
            elif line.startswith("cfn="):
                callee = name(line[4:])
            elif line.startswith("calls="):
                edge_calls[(function, callee)] += int(line[6:].split()[0])
                in_call = True
            elif line and (line[0].isdigit() or line[0] in "+-*"):
                # The position, then one cost per event (trailing zeros
                # may be left out).
                costs = [int(field) for field in line.split()[1:]]
                if in_call:
                    target = edge_cost[(function, callee)]
                    in_call = False
                elif function is not None:
                    target = self_cost[function]
                else:
                    continue
                for index, cost in enumerate(costs[:len(events)]):
                    target[index] += cost
    return events, self_cost, edge_cost, edge_calls


def base_name(function):
    """The function's qualified name without its parameter list."""
    return re.sub(r"\(.*", "", function)


def add(costs):
    """The sum of cost lists, event by event."""
    return [sum(column) for column in zip(*costs)] if costs else []


def group_cost(functions, verbs, self_cost, edge_cost, edge_calls):
    """(own, verbs, calls made, calls): per call into the first function;
    own and verbs are lists, one figure per event."""
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
    total = add([self_cost[f] for f in entries] +
                [c for (caller, callee), c in edge_cost.items()
                 if caller in entries and callee not in entries])
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
    backend = add([c for (caller, callee), c in edge_cost.items()
                   if caller in reached and verbs.search(base_name(callee))])
    backend = backend or [0] * len(total)
    # Calls made by that code (into the backend too): under qemu's TCG a
    # call and its return cost far more than their instructions.
    made = sum(n for (caller, callee), n in edge_calls.items()
               if caller in reached and callee != caller)
    own = [(t - b) / calls for t, b in zip(total, backend)]
    return own, [b / calls for b in backend], made / calls, calls


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
    events, self_cost, edge_cost, edge_calls = parse(args.profile)
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
        line = "%s own %.1f verbs %.1f made %.2f calls %d" % (
            label, own[0], backend[0], made, calls)
        if "Bc" in events:
            line += " branches %.1f" % own[events.index("Bc")]
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
