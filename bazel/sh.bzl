"""sh_test for the BUILD files of rdma_transport.

Bazel 4 and 7 have sh_test built in; rules_shell, where Bazel 8 moved it, is
neither packaged by Debian nor reachable offline. One place to change when
the project moves to a Bazel without the native rule.
"""

def sh_test(**kwargs):
    # buildifier: disable=native-sh-test
    native.sh_test(**kwargs)
