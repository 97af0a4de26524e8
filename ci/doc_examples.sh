#!/usr/bin/env bash
# Builds the code blocks of the docs as a user would type them in, so that a
# doc example that stops compiling fails CI.
#
#   ci/doc_examples.sh            # the WORKSPACE projects, with this machine's Bazel 4
#   ci/doc_examples.sh --bzlmod   # the bzlmod projects, with Bazel 7 (ci/sid_chroot.sh)
#   ci/doc_examples.sh --list     # print what each block of each doc becomes
#
# Every fenced code block of the docs below must be preceded by a marker
# comment (invisible on GitHub); an unmarked block is an error, so a new
# example cannot slip in unchecked:
#
#   <!-- doc-example: PROJECT FILE -->               the block is FILE of PROJECT
#                                                    (PROJECT may be a comma-separated list)
#   <!-- doc-example: PROJECT FILE in HARNESS -->    the block replaces the line
#                                                    `// doc-example block` of
#                                                    ci/doc_examples/HARNESS, as
#                                                    harness/FILE (a test each,
#                                                    ci/doc_examples/harness.BUILD)
#   <!-- doc-example: skip REASON -->                not checked (shell commands...)
#
# A project whose name starts with "bzlmod" is a Bazel module; the others are
# WORKSPACE projects. Each is written to
# ${DOC_EXAMPLES_DIR:-${TMPDIR:-/tmp}/rdma_transport_doc_examples}/PROJECT,
# with third_party/rdma_transport a link to this checkout (the path the docs
# use), then `bazel test //...` runs in it (which builds every target) with
# a disk cache shared by all projects. PASS or FAIL per project; the exit
# status is non-zero if any failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DOCS=(docs/downstream.md docs/simulator.md)
OUT="${DOC_EXAMPLES_DIR:-${TMPDIR:-/tmp}/rdma_transport_doc_examples}"
MODE=workspace
case "${1:-}" in
  --bzlmod) MODE=bzlmod ;;
  --list) MODE=list ;;
  "") ;;
  *)
    echo "usage: $0 [--bzlmod|--list]" >&2
    exit 2
    ;;
esac

mkdir -p "${OUT}"
# Writes the projects; prints one "PROJECT" line per project written.
extract() {
  python3 - "${ROOT}" "${OUT}" "$1" "${DOCS[@]}" <<'PY'
import os, re, shutil, sys

root, out, mode, docs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
marker = re.compile(r"^<!-- doc-example: (.*?) -->\s*$")
fence = re.compile(r"^(```+|~~~+)")
projects, errors, listing = {}, [], []
for doc in docs:
    lines = open(os.path.join(root, doc)).read().split("\n")
    i, pending = 0, None
    while i < len(lines):
        line = lines[i]
        m = marker.match(line)
        if m:
            pending = (m.group(1).split(), i + 1)
            i += 1
            continue
        f = fence.match(line)
        if not f:
            if line.strip():
                pending = None  # a marker names the block right after it
            i += 1
            continue
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not lines[i].startswith(f.group(1)):
            body.append(lines[i])
            i += 1
        i += 1
        where = "%s:%d" % (doc, start)
        if pending is None:
            errors.append("%s: code block without a <!-- doc-example: ... --> marker" % where)
            continue
        words, pending = pending[0], None
        if words[0] == "skip":
            listing.append("%s: skipped (%s)" % (where, " ".join(words[1:])))
            continue
        if len(words) not in (2, 4) or (len(words) == 4 and words[2] != "in"):
            errors.append("%s: bad marker: %s" % (where, " ".join(words)))
            continue
        names, name = words[0].split(","), words[1]
        text = "\n".join(body) + "\n"
        if len(words) == 4:
            # Into the harness/ package (ci/doc_examples/harness.BUILD).
            name = "harness/" + name
            harness = open(os.path.join(root, "ci/doc_examples", words[3])).read().split("\n")
            at = [n for n, h in enumerate(harness) if h.strip() == "// doc-example block"]
            if len(at) != 1:
                errors.append("%s: ci/doc_examples/%s needs one '// doc-example block' line" % (where, words[3]))
                continue
            text = "\n".join(harness[:at[0]]) + "\n" + text + "\n".join(harness[at[0] + 1:])
        for project in names:
            files = projects.setdefault(project, {})
            if name in files and files[name] != text:
                errors.append("%s: %s of %s given twice, differently" % (where, name, project))
            files[name] = text
            if name.startswith("harness/"):
                files["harness/BUILD.bazel"] = open(os.path.join(root, "ci/doc_examples/harness.BUILD")).read()
            listing.append("%s: %s/%s%s" % (where, project, name, " (in %s)" % words[3] if len(words) == 4 else ""))
if errors:
    print("\n".join(errors), file=sys.stderr)
    sys.exit(1)
if mode == "list":
    print("\n".join(listing))
    sys.exit(0)
for project, files in sorted(projects.items()):
    if project.startswith("bzlmod") != (mode == "bzlmod"):
        continue
    d = os.path.join(out, project)
    # Keep Bazel's output links out of the way of a rewrite.
    if os.path.isdir(d):
        for entry in os.listdir(d):
            if not entry.startswith("bazel-"):
                p = os.path.join(d, entry)
                shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.remove(p)
    os.makedirs(os.path.join(d, "third_party"), exist_ok=True)
    os.symlink(root, os.path.join(d, "third_party", "rdma_transport"))
    for name, text in files.items():
        path = os.path.join(d, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").write(text)
    print(project)
PY
}

if [[ "${MODE}" == list ]]; then
  extract list
  exit $?
fi
projects="$(extract "${MODE}")" || {
  echo "doc_examples: FAIL: the docs' code blocks could not be extracted"
  exit 1
}
if [[ -z "${projects}" ]]; then
  echo "doc_examples: FAIL: no ${MODE} project in ${DOCS[*]}"
  exit 1
fi

# The Bazel 7 builds in the chroot keep a cache of their own (another
# compiler: nothing to share); it is bind-mounted there.
if [[ "${MODE}" == bzlmod ]]; then
  CACHE="${DOC_EXAMPLES_BZLMOD_DISK_CACHE:-${OUT}/.disk_cache_bzlmod}"
else
  CACHE="${DOC_EXAMPLES_DISK_CACHE:-${OUT}/.disk_cache}"
fi
mkdir -p "${CACHE}"
FAILED=()
for project in ${projects}; do
  dir="${OUT}/${project}"
  log="${OUT}/${project}.log"
  echo "=== doc_examples: ${project} (${dir})"
  if [[ "${MODE}" == bzlmod ]]; then
    SID_CHROOT_BIND="${ROOT}:${OUT}:${CACHE}" "${ROOT}/ci/sid_chroot.sh" run "${dir}" \
      bash -c 'bazel test --disk_cache="$1" --nocache_test_results //... && bazel shutdown' _ "${CACHE}" >"${log}" 2>&1
  else
    (cd "${dir}" && bazel test --disk_cache="${CACHE}" //... && bazel shutdown) >"${log}" 2>&1
  fi
  status=$?
  grep -E '^(//|Executed)' "${log}" || true
  if ((status == 0)); then
    echo "PASS ${project}"
  else
    echo "FAIL ${project} (log: ${log})"
    tail -n 40 "${log}" | sed 's/^/    /'
    FAILED+=("${project}")
  fi
done
if ((${#FAILED[@]})); then
  echo "doc_examples: FAIL: ${FAILED[*]}"
  exit 1
fi
echo "doc_examples: PASS (${projects//$'\n'/ })"
