"""The command line's bad input (issue 22, class 9), run as a user would, in real processes with
timeouts: a missing module, a FIFO, a device or a folder where a file is read, a missing folder
where one is written, a zero with nothing to zero. Each is one clear line, the right exit status
(0 done, 1 the work failed, 2 bad input), and nothing made that was not asked for."""

from __future__ import annotations

import os
import pty
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env, read_to_the_end

KERNEL = "__kernel void k(__global int *a) { a[0] = 1; }\n"


def clmagic(*args: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """``clmagic ARGS`` into pipes, with no ``COLUMNS`` (a width the run's terminal left)."""
    env = child_env(CLMAGIC_CACHE_DIR=str(cache))
    env.pop("COLUMNS", None)
    return subprocess.run([sys.executable, "-m", "clmagic", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def one_line(proc: subprocess.CompletedProcess[str], code: int, words: str) -> None:
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("clmagic: ") and words in lines[0], \
        proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.fixture
def here(tmp_path: Path) -> Path:
    """A working folder holding one of each thing that is not a file: a FIFO, a socket, a
    character device (where allowed), a folder, a symlink to a FIFO."""
    os.mkfifo(tmp_path / "fifo.cl")
    sock = socket.socket(socket.AF_UNIX)
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        sock.bind("sock.cl")
    finally:
        os.chdir(here)
    (tmp_path / "dir.db").mkdir()
    (tmp_path / "link.cl").symlink_to(tmp_path / "fifo.cl")
    (tmp_path / "k.cl").write_text(KERNEL)
    yield tmp_path
    sock.close()


@pytest.mark.parametrize("args, words", [
    (("run", "-m", "no_such_module"), "no module named no_such_module"),
    (("run", "-m", "no_such_package.sub"), "no module named no_such_package.sub"),
    (("run", "-m", "clmagic.no_such"), "no module named clmagic.no_such"),
    (("run", "-m", "json"), "json is a package with no __main__ module"),
    (("run", "no_such.py"), "no such script: no_such.py"),
    (("run", "fifo.cl"), "fifo.cl is a FIFO, not a script"),
    (("run", "dir.db"), "dir.db is a directory, not a script"),
])
def test_run_of_something_that_cannot_run_is_one_line(here, args, words):
    one_line(clmagic(*args, cwd=here, cache=here / "cache"), 2, words)
    assert not (here / "cache").exists()


@pytest.mark.parametrize("name, kind", [("fifo.cl", "FIFO"), ("sock.cl", "socket"),
                                        ("link.cl", "FIFO"), ("dir.db", "directory")])
def test_reading_what_is_not_a_file_says_what_it_is(here, name, kind):
    one_line(clmagic("import", name, cwd=here, cache=here / "cache"), 2,
             f"{name} is a {kind}, not a bundle file")
    if kind != "directory":  # (warm takes a folder)
        one_line(clmagic("warm", name, cwd=here, cache=here / "cache"), 2,
                 f"{name} is a {kind}, not a file or folder")
        one_line(clmagic("run", name, cwd=here, cache=here / "cache"), 2,
                 f"{name} is a {kind}, not a script")
    assert not (here / "cache").exists()


def test_missing_inputs_are_named_as_missing(here):
    one_line(clmagic("import", "gone.db", cwd=here, cache=here / "cache"), 2,
             "no such bundle file: gone.db")
    one_line(clmagic("warm", "k.cl", "gone", cwd=here, cache=here / "cache"), 2,
             "no such file or folder: gone")
    assert not (here / "cache").exists()  # nothing built before the bad path was found


def test_export_makes_no_folder_it_was_not_asked_for(here, pocl):
    cache = here / "cache"
    assert clmagic("warm", "k.cl", "--device", pocl, cwd=here, cache=cache).returncode == 0
    for target in ("missing/b.db", "missing/deeper/b.db", str(here / "gone" / "b.db")):
        one_line(clmagic("export", target, cwd=here, cache=cache), 2, "no such folder")
    assert not (here / "missing").exists() and not (here / "gone").exists()
    one_line(clmagic("export", "fifo.cl", "--force", cwd=here, cache=cache), 2,
             "fifo.cl is a FIFO, not a bundle file")
    one_line(clmagic("export", "dir.db", "--force", cwd=here, cache=cache), 2,
             "dir.db is a directory, not a bundle file")
    one_line(clmagic("export", "k.cl", cwd=here, cache=cache), 2, "exists")
    assert (here / "k.cl").read_text() == KERNEL
    ok = clmagic("export", "b.db", cwd=here, cache=cache)
    assert ok.returncode == 0 and (here / "b.db").is_file(), ok.stderr


def test_stats_zero_says_what_it_did(here, pocl):
    cache = here / "cache"
    proc = clmagic("stats", "--zero", cwd=here, cache=cache)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("nothing to zero") and "set to zero" not in proc.stdout
    assert not cache.exists()  # zeroing nothing makes no cache
    assert clmagic("warm", "k.cl", "--device", pocl, cwd=here, cache=cache).returncode == 0
    proc = clmagic("stats", "--zero", cwd=here, cache=cache)
    assert proc.returncode == 0 and "set to zero" in proc.stdout, proc.stderr
    proc = clmagic("stats", "--zero", cwd=here, cache=cache)  # again: nothing counted since
    assert proc.returncode == 0 and proc.stdout.startswith("nothing to zero"), proc.stderr


def test_a_script_run_keeps_its_own_error(here):
    (here / "fails.py").write_text("open('no-such-file-here')\n")
    proc = clmagic("run", "fails.py", cwd=here, cache=here / "cache")
    assert proc.returncode == 1
    assert "FileNotFoundError" in proc.stderr and "fails.py" in proc.stderr


# -- a command line built for a terminal (issue 24, item 6) ----------------------------------

#: a long kernel name, so that a listing outgrows a small pipe and a narrow terminal
LONG = "accumulate_the_partial_sums_of_every_work_group_into_the_output_buffer_{n}_{k}"
INC = "some/deeply/nested/include/folder/for/the/kernels/of/this/project"


@pytest.fixture(scope="module")
def many(tmp_path_factory, pocl) -> Path:
    """A cache of 8 entries, each of a program with four long kernel names, built with an
    include folder (a long path in the options)."""
    folder = tmp_path_factory.mktemp("many")
    (folder / INC).mkdir(parents=True)
    for n in range(8):
        body = "".join(f"__kernel void {LONG.format(n=n, k=k)}(__global int *a) "
                       f"{{ a[0] = {k}; }}\n" for k in range(4))
        (folder / f"m{n}.cl").write_text(body)
    cache = folder / "cache"
    proc = clmagic("warm", ".", "--device", pocl, "-I", INC, "--jobs", "2", cwd=folder,
                   cache=cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cache


def on_a_pty(args: list[str], cache: Path, columns: int, *, env_columns: bool) -> str:
    """What a user sees: the command on a pseudo-terminal of ``columns`` columns (told by the
    terminal's window size, and also by COLUMNS when ``env_columns``)."""
    import fcntl
    import struct
    import termios

    env = child_env(CLMAGIC_CACHE_DIR=str(cache))
    env.pop("COLUMNS", None)
    if env_columns:
        env["COLUMNS"] = str(columns)
    pid, fd = pty.fork()
    if pid == 0:  # the child: its terminal's size set before the command starts
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        os.execve(sys.executable, [sys.executable, "-m", "clmagic", *args], env)
    code, out = read_to_the_end(fd, pid)
    assert code == 0, out
    return out.decode().replace("\r\n", "\n")


@pytest.mark.parametrize("columns", [80, 100])
@pytest.mark.parametrize("env_columns", [False, True])
def test_ls_fits_the_terminal_and_drops_columns_rather_than_wrapping(many, columns,
                                                                     env_columns):
    import json

    from clmagic._format import fmt_bytes

    text = on_a_pty(["ls"], many, columns, env_columns=env_columns)
    head, *rows, total = text.rstrip("\n").split("\n")
    assert all(len(line) <= columns for line in text.splitlines()), text
    assert head.split()[:5] == ["key", "kernels", "size", "build", "ms"] and len(rows) == 8
    data = json.loads(clmagic("ls", "--json", cwd=many, cache=many).stdout)
    for row, entry in zip(rows, data, strict=True):  # same order: most recently used first
        assert row.startswith(entry["key"][:12] + "…  ")
        assert fmt_bytes(entry["stored_bytes"]) in row  # the one unit system
        assert f"{entry['build_ms']:.1f}" in row.split()  # ms to 0.1
    assert total.startswith("8 entries, ")
    if columns == 80:  # the options (the widest, least needed) went, and it says so
        assert "options" not in head and "not shown in 80 columns: " in text
    assert "<pyopencl>" not in text  # (an include of the user's own, kept as a path)


def test_a_listing_into_a_pipe_is_not_cut(many):
    proc = clmagic("ls", cwd=many, cache=many)
    assert proc.returncode == 0 and LONG.format(n=0, k=0) in proc.stdout
    assert "not shown" not in proc.stdout and "options" in proc.stdout.splitlines()[0]


def test_config_columns_are_left_aligned(many):
    text = on_a_pty(["config"], many, 100, env_columns=False)
    head, *rows = text.rstrip("\n").split("\n")
    starts = [head.index(word) for word in ("variable", "value", "origin")]
    for row in rows:
        for start in starts:  # every cell starts under its heading
            assert row[start - 2:start] == "  " and row[start] != " " or row[start:start + 1] \
                in ("", " "), (head, row)
    assert rows[0].startswith("cache  ") and "CLMAGIC_CACHE_DIR" in rows[0]


@pytest.mark.parametrize("args", [
    ("ls", "--csv"), ("ls", "--json"), ("ls",), ("ls", "--help"), ("config",), ("stats",),
    ("--help",), ("export", "--help"), ("info",), ("config", "--json"), ("stats", "--json"),
    ("devices",),
])
@pytest.mark.parametrize("reads", [2, 0])
def test_a_reader_that_goes_away_ends_it_quietly(many, args, reads):
    """``clmagic ls --csv | head -2``: a real pipe, closed after 2 lines, ends the command with
    no traceback, no "Exception ignored" and exit 0 (the reader has what it wanted), whatever
    it was printing. Closed before anything is read (``reads=0``), every write meets it: the
    quiet exit is then certain, not only when the output outgrew what the pipe holds."""
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "clmagic", *args], stdout=w,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=child_env(CLMAGIC_CACHE_DIR=str(many)))
    os.close(w)
    got = b""
    while got.count(b"\n") < reads:
        byte = os.read(r, 1)
        assert byte, f"the output ended before {reads} lines"
        got += byte
    os.close(r)
    _, err = proc.communicate(timeout=120)
    assert err == b"", err
    assert proc.returncode == 0  # the reader has what it wanted: the work did not fail


def test_help_shows_the_magic_as_written_and_export_names_its_option(here, pocl):
    for command in ("ls", "clear"):
        helped = clmagic(command, "--help", cwd=here, cache=here / "cache").stdout
        assert "(%%clkernel," in " ".join(helped.split()) and "%%%%" not in helped
    cache = here / "cache"
    assert clmagic("warm", "k.cl", "--device", pocl, cwd=here, cache=cache).returncode == 0
    (here / "b.db").write_text("mine")
    proc = clmagic("export", "b.db", cwd=here, cache=cache)
    one_line(proc, 2, "b.db exists; choose another path or pass --force")
    assert "overwrite" not in proc.stderr and (here / "b.db").read_text() == "mine"
