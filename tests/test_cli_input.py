"""The command line's bad input (issue 22, class 9), run as a user would, in real processes with
timeouts: a missing module, a FIFO, a device or a folder where a file is read, a missing folder
where one is written, a zero with nothing to zero. Each is one clear line, the right exit status
(0 done, 1 the work failed, 2 bad input), and nothing made that was not asked for."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env

KERNEL = "__kernel void k(__global int *a) { a[0] = 1; }\n"


def clmagic(*args: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clmagic", *args], cwd=cwd,
                          env=child_env(CLMAGIC_CACHE_DIR=str(cache)), capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


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
