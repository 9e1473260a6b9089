"""Every command read in an 80-column terminal (issue 35, item 6): each run in a child with
``COLUMNS=80`` on a cache holding entries with long kernel names and a long include path, and
every line it prints is at most 80 characters (a line a terminal wraps reads as two); the same
commands into a pipe (no ``COLUMNS``) keep each device and figure on one line for ``grep``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env, run_child

LONG = "accumulate_the_partial_sums_of_every_tile_{k}"
INC = "a_rather_long_include_folder_name/with/some/depth/to/it"


def clmagic(*args: str, cache: Path, cwd: Path, columns: str | None = "80"
            ) -> subprocess.CompletedProcess[str]:
    env = child_env(CLMAGIC_CACHE_DIR=str(cache))
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "clmagic", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def filled(tmp_path_factory, pocl) -> Path:
    """A folder whose ``cache`` holds two entries of long kernel names built with ``-I`` a
    long folder, one of them loaded once (a hit in the lifetime figures)."""
    folder = tmp_path_factory.mktemp("width")
    (folder / INC).mkdir(parents=True)
    sources = ["".join(f"__kernel void {LONG.format(k=k)}_{n}(__global int *a) {{ a[0] = {k}; }}\n"
                       for k in range(3)) for n in range(2)]
    code = ("import clmagic\n"
            f"for s in {sources!r} * 2:\n"  # the second round finds both cached
            f"    clmagic.build(s, ['-I', {str(folder / INC)!r}], {pocl!r})\n")
    proc = run_child(code, CLMAGIC_CACHE_DIR=str(folder / "cache"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return folder


COMMANDS = [("devices",), ("info",), ("stats",), ("ls",), ("config",), ("--help",),
            ("ls", "--help"), ("demo",)]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_every_line_fits_80_columns(filled, pocl, args):
    extra = ("--device", pocl) if args[0] == "demo" else ()
    proc = clmagic(*args, *extra, cache=filled / "cache", cwd=filled)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) >= 2
    long = [line for line in lines if len(line) > 80]
    assert not long, "\n".join(long)


def test_wrapped_lines_keep_every_value_whole(filled, pocl):
    """At 80 columns a device's details wrap under its name; nothing is cut: the fingerprint,
    the driver and the entries are all there, and into a pipe each device is one line."""
    import clmagic as lib

    info = lib.resolve_device(pocl)[0]
    narrow = clmagic("info", cache=filled / "cache", cwd=filled).stdout
    wide = clmagic("info", cache=filled / "cache", cwd=filled, columns=None).stdout
    for text in (narrow, wide):
        assert f"fingerprint {info.fingerprint}" in text
        assert f"driver {info.driver_version}" in text and "2 entries" in text
    (line,) = [ln for ln in wide.splitlines() if info.fingerprint in ln]
    assert line.startswith(f"* {info.spec}") and "2 entries" in line  # one line, the default
    assert "CLMAGIC_RECORD" in narrow and "record:" not in narrow  # the history in words
    devices = clmagic("devices", cache=filled / "cache", cwd=filled, columns=None).stdout
    assert sum(info.fingerprint in ln for ln in devices.splitlines()) == 1


def test_a_closed_pipe_exits_0_quietly(filled):
    """``clmagic devices | head -1``: the reader has what it wanted; the command did not fail
    (exit 1 is "the work failed"), and says nothing."""
    proc = subprocess.run(f"{sys.executable} -m clmagic devices | head -1", shell=True,
                          env=child_env(CLMAGIC_CACHE_DIR=str(filled / "cache")),
                          capture_output=True, text=True, timeout=120,
                          executable="/bin/bash")
    assert proc.stdout.count("\n") == 1 and proc.stderr == ""
    status = subprocess.run(f"set -o pipefail; {sys.executable} -m clmagic devices | head -1"
                            " >/dev/null", shell=True, executable="/bin/bash", timeout=120,
                            env=child_env(CLMAGIC_CACHE_DIR=str(filled / "cache")))
    assert status.returncode == 0
