"""header_example_test: a harness with the code examples of headers spliced in."""

load("//bazel:cc.bzl", "cc_test")

def header_example_test(name, harness, headers, deps, size = "small"):
    """A cc_test of `harness` with its `// header-example: PATH N` lines replaced.

    Args:
      name: the test.
      harness: the .cc file whose placeholders name blocks of `headers`.
      headers: labels of the headers the placeholders name.
      deps: what the spliced file needs.
      size: the test's size.
    """
    native.genrule(
        name = name + "_spliced",
        srcs = [harness] + headers,
        outs = [name + "_spliced.cc"],
        tools = ["//tests/header_examples:header_examples.py"],
        cmd = "python3 $(location //tests/header_examples:header_examples.py) " +
              "splice $(location %s) $@" % harness,
    )
    cc_test(
        name = name,
        size = size,
        srcs = [name + "_spliced.cc"],
        deps = deps,
    )
