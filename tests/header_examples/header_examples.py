#!/usr/bin/env python3
"""The code examples in the comments of public headers, compiled.

An example is a block of comment lines indented by at least three spaces
past the `//` (blank comment lines end a block), as Abseil's headers show
them. Blocks are numbered from 1 in each header, in file order.

  header_examples.py splice HARNESS OUT [--root DIR]
      Writes HARNESS to OUT with every line `// header-example: PATH N`
      replaced by block N of header PATH, under a #line directive so that a
      compiler error names the header's own line.

  header_examples.py check --not-code FILE --harness H... --header PATH...
      Fails unless every block of every header is claimed exactly once:
      spliced by a harness, or listed in FILE (`PATH N  why`) as not code
      (a table, a diagram, a list).

  header_examples.py list PATH...
      Prints each header's blocks with their numbers.
"""
import argparse
import os
import re
import sys

PLACEHOLDER = re.compile(r"^(\s*)// header-example: (\S+) (\d+)\s*$")


def blocks(path, root="."):
    """[(first line number, [text lines])] of the header at `path`."""
    with open(os.path.join(root, path)) as f:
        lines = f.read().split("\n")
    found, current = [], []
    for number, line in enumerate(lines, start=1):
        stripped = line.lstrip()
        text = stripped[2:] if stripped.startswith("//") else None
        if text is not None and text.startswith("   ") and text.strip():
            current.append((number, text))
            continue
        if current:
            found.append(current)
            current = []
    if current:
        found.append(current)
    result = []
    for block in found:
        indent = min(len(t) - len(t.lstrip()) for _, t in block)
        result.append((block[0][0], [t[indent:] for _, t in block]))
    return result


def claimed_by(harness):
    """[(path, n, line number)] of the placeholders in `harness`."""
    claims = []
    with open(harness) as f:
        for number, line in enumerate(f.read().split("\n"), start=1):
            m = PLACEHOLDER.match(line)
            if m:
                claims.append((m.group(2), int(m.group(3)), number))
    return claims


def splice(harness, out, root):
    with open(harness) as f:
        lines = f.read().split("\n")
    result = []
    for number, line in enumerate(lines, start=1):
        m = PLACEHOLDER.match(line)
        if not m:
            result.append(line)
            continue
        indent, path, n = m.group(1), m.group(2), int(m.group(3))
        found = blocks(path, root)
        if not 1 <= n <= len(found):
            sys.exit("%s:%d: %s has %d example block(s), not %d" %
                     (harness, number, path, len(found), n))
        first, text = found[n - 1]
        result.append('#line %d "%s"' % (first, path))
        result.extend(indent + t if t else "" for t in text)
        result.append('#line %d "%s"' % (number + 1, harness))
    with open(out, "w") as f:
        f.write("\n".join(result))


def check(not_code, harnesses, headers, root):
    claims = {}
    errors = []
    for harness in harnesses:
        for path, n, number in claimed_by(harness):
            claims.setdefault((path, n), []).append("%s:%d" % (harness, number))
    with open(not_code) as f:
        for number, line in enumerate(f.read().split("\n"), start=1):
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            if len(words) < 3 or not words[1].isdigit():
                errors.append("%s:%d: want 'PATH N why'" % (not_code, number))
                continue
            claims.setdefault((words[0], int(words[1])), []).append(
                "%s:%d" % (not_code, number))
    known = set(headers)
    for (path, n), where in sorted(claims.items()):
        if path not in known:
            errors.append("%s: %s is not one of the public headers checked" %
                          (where[0], path))
    for path in headers:
        found = blocks(path, root)
        for n, (first, text) in enumerate(found, start=1):
            where = claims.get((path, n), [])
            if not where:
                errors.append(
                    "%s:%d: example block %d is neither compiled by a harness "
                    "(// header-example: %s %d) nor listed in %s as not "
                    "code:\n    %s" % (path, first, n, path, n, not_code,
                                      "\n    ".join(text)))
            elif len(where) > 1:
                errors.append("%s:%d: block %d claimed %d times: %s" %
                              (path, first, n, len(where), ", ".join(where)))
        for (claimed_path, n), where in claims.items():
            if claimed_path == path and n > len(found):
                errors.append("%s: %s has %d block(s), not %d" %
                              (where[0], path, len(found), n))
    if errors:
        print("\n".join(errors), file=sys.stderr)
        sys.exit(1)
    print("header_examples: %d headers, %d blocks, every one claimed" %
          (len(headers), sum(len(blocks(p, root)) for p in headers)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("splice")
    p.add_argument("harness")
    p.add_argument("out")
    p.add_argument("--root", default=".")
    p = sub.add_parser("check")
    p.add_argument("--not-code", required=True)
    p.add_argument("--harness", nargs="+", required=True)
    p.add_argument("--header", nargs="+", required=True)
    p.add_argument("--root", default=".")
    p = sub.add_parser("list")
    p.add_argument("header", nargs="+")
    p.add_argument("--root", default=".")
    args = parser.parse_args()
    if args.command == "splice":
        splice(args.harness, args.out, args.root)
    elif args.command == "check":
        check(args.not_code, args.harness, args.header, args.root)
    else:
        for path in args.header:
            for n, (first, text) in enumerate(blocks(path, args.root), 1):
                print("%s %d (line %d)" % (path, n, first))
                print("\n".join("    " + t for t in text))


if __name__ == "__main__":
    main()
