"""Repository rules that wrap Debian packages as Bazel external repositories.

Every dependency of rdma_transport comes from a Debian package installed by
ci/install_deps.sh. These rules never download anything: they check that the
package's files are present (failing with the apt-get line to run if not) and
write BUILD files whose targets carry upstream's labels, so a downstream
workspace can swap any of them for its own copy. Link flags come from the
packages' pkg-config files (bazel/pkg_config.bzl).
"""

load("//bazel:pkg_config.bzl", "LIBRARIES", "write_linkopts_bzl")

def _check_required_files(repository_ctx):
    missing = [f for f in repository_ctx.attr.required_files if not repository_ctx.path(f).exists]
    if missing:
        fail("@{name}: missing {files}. Install the Debian package(s) with: apt-get install -y {pkgs} (or run ci/install_deps.sh)".format(
            name = repository_ctx.name,
            files = ", ".join(missing),
            pkgs = " ".join(repository_ctx.attr.debian_packages),
        ))

def _debian_library_impl(repository_ctx):
    _check_required_files(repository_ctx)
    repository_ctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(repository_ctx.name))
    write_linkopts_bzl(repository_ctx, LIBRARIES[repository_ctx.attr.module] if repository_ctx.attr.module else {})
    for build_file, path in repository_ctx.attr.build_files.items():
        repository_ctx.symlink(build_file, path)

debian_library = repository_rule(
    implementation = _debian_library_impl,
    doc = "A system library from Debian packages, exposed through hand-written BUILD files.",
    local = True,
    attrs = {
        "build_files": attr.label_keyed_string_dict(
            mandatory = True,
            doc = "BUILD file template -> path of the BUILD file inside the repository.",
        ),
        "module": attr.string(doc = "Key of bazel/pkg_config.bzl's LIBRARIES: the link flags of linkopts.bzl."),
        "required_files": attr.string_list(doc = "Absolute paths that must exist."),
        "debian_packages": attr.string_list(doc = "Packages that provide required_files."),
    },
)

def _debian_rules_cc_impl(repository_ctx):
    """Debian's rules_cc 0.0.4 calls use_cpp_toolchain(), which Bazel 4.2.3 lacks.

    The copy made here replaces that call with the toolchain type it returns on
    Bazel versions without optional toolchains.
    """
    source = repository_ctx.path(repository_ctx.attr.path)
    if not source.exists:
        fail("@rules_cc: {} not found. Install it with: apt-get install -y bazel-rules-cc".format(source))
    copy = repository_ctx.execute(["cp", "-R", "{}/.".format(source), "."])
    if copy.return_code != 0:
        fail("@rules_cc: copying {} failed: {}".format(source, copy.stderr))
    found = repository_ctx.execute(["grep", "-rl", "--include=*.bzl", "use_cpp_toolchain", "."])
    for relative in found.stdout.splitlines():
        content = repository_ctx.read(relative)
        content = content.replace(', "use_cpp_toolchain")', ")")
        content = content.replace("use_cpp_toolchain()", '["@bazel_tools//tools/cpp:toolchain_type"]')
        repository_ctx.file(relative, content, executable = False)

debian_rules_cc = repository_rule(
    implementation = _debian_rules_cc_impl,
    doc = "Debian's bazel-rules-cc, made loadable by Bazel 4.2.3.",
    local = True,
    attrs = {"path": attr.string(default = "/usr/share/bazel/rules/cc")},
)

def _empty_repository_impl(repository_ctx):
    repository_ctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(repository_ctx.name))
    repository_ctx.file("BUILD.bazel", repository_ctx.attr.build_file_content)

empty_repository = repository_rule(
    implementation = _empty_repository_impl,
    doc = "A local stand-in for a repository Bazel would otherwise download.",
    attrs = {"build_file_content": attr.string(default = "")},
)
