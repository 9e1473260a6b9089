"""Bad input to %%clkernel, through a real InteractiveShell: each case gives one line (an error
or a warning) and changes nothing else (namespace, cache folder, history)."""

from __future__ import annotations

import pyopencl as cl
import pytest
from conftest import SAXPY
from IPython.utils.capture import capture_output

HELPER_ONLY = "float twice(float x) { return 2.0f * x; }\n"


def _snapshot(shell, compiler, cache_dir):
    ns = {k: v for k, v in shell.user_ns.items() if not k.startswith("_")}
    files = sorted(p.name for p in cache_dir.rglob("*")) if cache_dir.exists() else []
    return ns, files, len(compiler.history.records)


def _run(shell, line: str, cell: str):
    with capture_output() as cap:
        res = shell.run_cell(f"%%clkernel {line}\n{cell}")
    return res, (cap.stdout + cap.stderr).strip()


@pytest.mark.parametrize(
    "line, cell, message",
    [
        ("", "\n   \n", "empty cell"),
        ("", "// just a note\n/* and a block\n   comment */\n", "only comments"),
        ("--bogus", SAXPY, "unrecognized arguments: --bogus"),
        ("--opt -O3", SAXPY, "--opt is not an option of %%clkernel; did you mean --opts?"),
        ("--devcie pocl", SAXPY, "--devcie is not an option of %%clkernel; did you mean --device?"),
        ("--name=prog --quite", SAXPY,
         "--quite is not an option of %%clkernel; did you mean --quiet?"),
        ("--opts", SAXPY, "--opts needs build options"),
        ("--opts -D 1X=2", SAXPY, "malformed define '-D1X=2'"),
        ("--opts -DX=1 -D", SAXPY, "-D needs a value"),
        ("--device no-such-device", SAXPY, "no OpenCL device matches 'no-such-device'"),
        ("--device 0:99", SAXPY, "no OpenCL device 0:99"),
        ("", "__kernel void k(__global int *a) { a[0] = 1; } // \udcff\n", "not UTF-8"),
        ("", SAXPY + "//" + "x" * (5 << 20) + "\n", "over clmagic's 4 MiB limit"),
        ('--name "x --opts y"', SAXPY, "'x --opts y' is not a Python variable name"),
        ('--name "x', SAXPY, "No closing quotation"),
        ("--name 'a b'", SAXPY, "'a b' is not a Python variable name"),
        ("--name 1x", SAXPY, "'1x' is not a Python variable name"),
        ("--name class", SAXPY, "'class' is not a Python variable name"),
        ("--name a-b", SAXPY, "'a-b' is not a Python variable name"),
        ("--name", SAXPY, "expected one argument"),
        ('--device ""', SAXPY, "--device needs a device"),
        ("--device '  '", SAXPY, "--device needs a device"),
        ("--device", SAXPY, "expected one argument"),
        ("--device '0:0", SAXPY, "No closing quotation"),
        ("--quiet extra", SAXPY, "unrecognized arguments: extra"),
        ('--name x --opts "-DX=1', SAXPY, "cannot parse build options"),
        ("--opts -DX=1 --name \"y", SAXPY, "cannot parse build options"),
    ],
    ids=["empty", "only-comments", "unknown-option", "opt-typo", "device-typo", "quiet-typo",
         "opts-empty", "malformed-define",
         "define-no-value", "unknown-device", "index-out-of-range", "non-utf8", "5MB",
         "name-holding-opts", "unbalanced-quote", "name-with-space", "name-digit",
         "name-keyword", "name-dash", "name-no-value", "device-empty", "device-blank",
         "device-no-value", "device-unbalanced", "extra-word", "opts-unbalanced",
         "opts-then-unbalanced"],
)
def test_bad_input_is_one_line_and_changes_nothing(shell, compiler, cache_dir, line, cell,
                                                   message):
    shell.user_ns["keep"] = 1
    before = _snapshot(shell, compiler, cache_dir)
    res, out = _run(shell, line, cell)
    assert not res.success
    assert len(out.splitlines()) == 1 and message in out, out
    assert out.startswith(("clmagic:", "UsageError")) and "Traceback" not in out
    assert _snapshot(shell, compiler, cache_dir) == before


def test_kernel_name_clashing_with_a_user_variable_warns_and_keeps_it(shell):
    shell.user_ns["saxpy"] = "my data"
    res, out = _run(shell, "--quiet", SAXPY)
    assert res.success
    (line,) = out.splitlines()
    assert line.startswith("clmagic: warning: kernel 'saxpy' not bound") and "str" in line
    assert shell.user_ns["saxpy"] == "my data"
    assert isinstance(shell.user_ns["scale"], cl.Kernel)
    res, out = _run(shell, "--quiet", SAXPY)  # again: said again, still kept
    assert len(out.splitlines()) == 1 and shell.user_ns["saxpy"] == "my data"


def test_a_cell_without_kernels_compiles_and_says_so(shell, compiler, cache_dir):
    before = set(shell.user_ns)
    res, out = _run(shell, "--quiet", HELPER_ONLY)
    assert res.success
    (line,) = out.splitlines()
    assert "defines no __kernel function" in line
    assert compiler.history.records[-1].outcome == "MISS"
    assert set(shell.user_ns) - before <= {"cl_ctx", "cl_queue"}
    assert len(list(cache_dir.rglob("*.clbin"))) == 1


def test_the_clcache_parser_lists_exactly_the_subcommands_the_table_runs():
    from clmagic.ipython.clcache import CLCACHE
    from clmagic.ipython.magics import CLCACHE_COMMANDS, CLMagics

    assert CLCACHE_COMMANDS == tuple(name for name in CLCACHE if name)
    choices = {a.dest: a.choices for a in CLMagics.clcache.parser._actions}["command"]
    assert tuple(choices) == CLCACHE_COMMANDS


@pytest.mark.parametrize("line", ["--device pocl --name p", "-q --opts -O3", "--no-cache"])
def test_a_line_read_again_gives_the_same_fresh_arguments(line):
    """A re-run cell's line is read once: the arguments it gets again are equal and a copy
    (changing one changes nothing of the next)."""
    from clmagic.ipython.line import parse_line, split_opts
    from clmagic.ipython.magics import CLMagics

    rest, _ = split_opts(line)
    first = parse_line(CLMagics.clkernel, rest)
    again = parse_line(CLMagics.clkernel, rest)
    assert vars(first) == vars(again) and first is not again
    again.name = "changed"
    assert parse_line(CLMagics.clkernel, rest).name == first.name
