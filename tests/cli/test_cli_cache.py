"""The ``clmagic`` cache commands, run as a user would: ``ls``, ``stats``, ``clear``, ``prune``,
``export``, ``import``, ``warm``, ``config``: output, ``--json``, exit status 0/1/2, and bad
input as one clear line with nothing lost."""

from __future__ import annotations

import json
import os
import pty
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import child_env, read_to_the_end
from stores import can_drop_dac, drop_dac

from clmagic.entry_file import decode

COMMANDS = ("ls", "stats", "clear", "prune", "export", "import", "warm", "config")
KERNEL = "__kernel void {name}(__global float *a) {{ a[get_global_id(0)] *= {n}.0f; }}\n"


def clmagic(*args: str, cache: Path | str | None = None, preexec=None, **env: str):
    if cache is not None:
        env["CLMAGIC_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, "-m", "clmagic", *args], env=child_env(**env),
                          capture_output=True, text=True, timeout=300, preexec_fn=preexec)


def one_line_error(proc: subprocess.CompletedProcess[str], code: int, words: str) -> None:
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("clmagic")]
    assert len(lines) == 1 and words in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("kernels")
    (folder / "sub").mkdir()
    for n in range(1, 4):
        (folder / ("sub" if n == 3 else ".") / f"k{n}.cl").write_text(KERNEL.format(name=f"k{n}",
                                                                                    n=n))
    (folder / "bad.cl").write_text("__kernel void bad(__global float *a) { a[0] = nope; }\n")
    (folder / "notes.txt").write_text("not a kernel")
    return folder


@pytest.fixture(scope="module")
def warmed(kernels, tmp_path_factory, pocl) -> tuple[Path, subprocess.CompletedProcess[str]]:
    cache = tmp_path_factory.mktemp("warmed") / "cache"
    proc = clmagic("warm", str(kernels), "--jobs", "2", "--device", pocl, cache=cache)
    return cache, proc


@pytest.fixture
def cache(warmed, tmp_path) -> Path:
    """A private copy of the warmed cache (for commands that change it)."""
    copy = tmp_path / "cache"
    shutil.copytree(warmed[0], copy)
    return copy


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command):
    proc = clmagic(command, "--help")
    assert proc.returncode == 0 and f"usage: clmagic {command}" in proc.stdout


def test_warm_builds_in_parallel_and_summarises(warmed, kernels, pocl):
    cache, proc = warmed
    assert proc.returncode == 1  # one file failed
    assert "built 3 · already cached 0 · failed 1" in proc.stdout
    failed = [ln for ln in proc.stdout.splitlines() if "failed:" in ln]
    assert len(failed) == 1 and "bad.cl" in failed[0] and "nope" in failed[0]
    again = clmagic("warm", str(kernels), "--device", pocl, "--json", cache=cache)
    report = json.loads(again.stdout)
    assert again.returncode == 1 and len(report["cached"]) == 3 and report["built"] == []
    assert report["failed"][0]["path"].endswith("bad.cl")
    good = clmagic("warm", str(kernels / "sub"), "--device", pocl, cache=cache)
    assert good.returncode == 0 and "already cached 1 · failed 0" in good.stdout


def test_warm_passes_defines_and_includes(tmp_path, pocl):
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "scale.h").write_text("#define FACTOR 3.0f\n")
    src = tmp_path / "d.cl"
    src.write_text('#include "scale.h"\n__kernel void d(__global float *a) '
                   "{ a[0] = FACTOR * WIDTH; }\n")
    proc = clmagic("warm", str(src), "-D", "WIDTH=4", "-I", str(tmp_path / "inc"), "--device",
                   pocl, "--jobs", "1", cache=tmp_path / "cache")
    assert proc.returncode == 0 and "built 1" in proc.stdout, proc.stdout + proc.stderr
    listed = json.loads(clmagic("ls", "--json", cache=tmp_path / "cache").stdout)
    assert listed[0]["options"] == f"-DWIDTH=4 -I{tmp_path / 'inc'}"


@pytest.mark.parametrize("args, words", [
    (("warm", "no/such/folder"), "no such file or folder: no/such/folder"),
    (("warm", ".", "--jobs", "0"), "--jobs 0: need at least one process"),
    (("prune", "--max-size", "-1G"), "negative"),
    (("prune", "--max-size", "lots"), "not understood"),
    (("prune", "--older-than", "-3d"), "negative"),
    (("clear", "--older-than", "yesterday"), "not understood"),
    (("clear", "zz-not-hex", "--yes"), "not hexadecimal"),
    (("import", "no/such.db"), "no such bundle file"),
    (("ls", "--sort", "colour"), "no such column"),
])
def test_bad_input_is_one_line_and_exit_2(args, words, cache):
    before = sorted(p.name for p in cache.rglob("*.clbin"))
    one_line_error(clmagic(*args, cache=cache), 2, words)
    assert sorted(p.name for p in cache.rglob("*.clbin")) == before  # nothing lost


def test_warm_with_no_cl_files(tmp_path, cache):
    (tmp_path / "empty").mkdir()
    one_line_error(clmagic("warm", str(tmp_path / "empty"), cache=cache), 2, "no .cl files")


def test_ls_lists_newest_use_first_as_table_csv_and_json(cache, pocl):
    table = clmagic("ls", cache=cache)
    assert table.returncode == 0
    head, *rows, total = table.stdout.splitlines()
    assert head.split()[:4] == ["key", "kernels", "size", "build"] and len(rows) == 3
    assert total.startswith("3 entries, ") and "KiB" in total  # the sizes' one unit system
    data = json.loads(clmagic("ls", "--json", cache=cache).stdout)
    assert {d["kernels"] for d in data} == {"k1", "k2", "k3"}
    assert [d["last_used"] for d in data] == sorted((d["last_used"] for d in data),
                                                    reverse=True)
    assert {"key", "fingerprint", "stored_bytes", "hits"} <= set(data[0])  # every column
    csv = clmagic("ls", "--csv", "--sort", "kernels", cache=cache).stdout.splitlines()
    assert csv[0].startswith("key,kernels") and [ln.split(",")[1] for ln in csv[1:]] == [
        "k1", "k2", "k3"]
    assert json.loads(clmagic("ls", "--json", "--device", pocl, cache=cache).stdout)
    one_line_error(clmagic("ls", "--device", "no-such-device", cache=cache), 2, "device")


def test_stats_shows_session_and_lifetime_and_zero(cache, pocl):
    proc = clmagic("stats", cache=cache)
    assert proc.returncode == 0
    # its own process made no trips: no session column, which would only ever read 0
    assert proc.stdout.splitlines()[0].split() == ["lifetime"]
    assert proc.stdout.splitlines()[1].split() == ["misses", "3"]
    data = json.loads(clmagic("stats", "--json", cache=cache).stdout)
    assert data["lifetime"]["counts"]["MISS"] == 3 and data["entries"] == 3
    assert data["max_size"] == 1 << 30
    zero = clmagic("stats", "--zero", cache=cache)
    assert zero.returncode == 0 and "set to zero" in zero.stdout
    data = json.loads(clmagic("stats", "--json", cache=cache).stdout)
    assert data["lifetime"]["counts"] == {} and data["entries"] == 3


def test_clear_filters_and_clears_all_without_asking_off_a_terminal(cache):
    keys = json.loads(clmagic("ls", "--json", cache=cache).stdout)
    one = clmagic("clear", keys[0]["key"][:10], "--json", cache=cache)
    assert one.returncode == 0 and json.loads(one.stdout)["entries"] == 1
    rest = clmagic("clear", cache=cache)
    assert rest.returncode == 0 and "removed 2 entries" in rest.stdout
    assert json.loads(clmagic("ls", "--json", cache=cache).stdout) == []


def _on_a_terminal(args: list[str], answer: bytes, env: dict[str, str]) -> tuple[int, str]:
    pid, fd = pty.fork()
    if pid == 0:  # the child: stdin/stdout/stderr are the terminal
        os.execve(sys.executable, [sys.executable, "-m", "clmagic", *args], env)
    out = b""
    deadline = time.monotonic() + 120
    while b"[y/N]" not in out and time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 1024)
        except OSError:  # the command ended without asking
            chunk = b""
        if not chunk:
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status), out.decode(errors="replace")
        out += chunk
    os.write(fd, answer)
    code, out = read_to_the_end(fd, pid, out)
    return code, out.decode(errors="replace")


def test_clear_all_asks_on_a_terminal(cache):
    env = child_env(CLMAGIC_CACHE_DIR=str(cache))
    code, out = _on_a_terminal(["clear"], b"n\n", env)
    size = sum(json.loads(clmagic("ls", "--json", cache=cache).stdout)[i]["stored_bytes"]
               for i in range(3))
    from clmagic._format import fmt_bytes

    asked = f"remove 3 entries ({fmt_bytes(size)}) from directory cache {cache}? [y/N]"
    assert code == 1 and asked in out and "nothing removed" in out, out
    assert len(list(cache.rglob("*.clbin"))) == 3
    code, out = _on_a_terminal(["clear"], b"y\n", env)
    assert code == 0 and "removed 3 entries" in out
    assert not list(cache.rglob("*.clbin"))
    proc = subprocess.run([sys.executable, "-m", "clmagic", "clear"], env=env, timeout=120,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and proc.stdout.startswith("nothing to remove: no entries")


def test_clear_of_an_empty_cache_does_not_ask(tmp_path):
    (tmp_path / "cache").mkdir()
    code, out = _on_a_terminal(["clear"], b"", child_env(CLMAGIC_CACHE_DIR=str(tmp_path / "c")))
    assert code == 0 and "[y/N]" not in out and "nothing to remove: no entries" in out, out


def test_prune_by_size_and_age(cache):
    # an entry's size as prune counts it: its file, its .hits and its code index (`ls --json`)
    listed = json.loads(clmagic("ls", "--json", cache=cache).stdout)
    sizes = sorted(e["stored_bytes"] for e in listed)
    one_line_error(clmagic("prune", "--max-size", "0", cache=cache), 2, "0 means no limit")
    assert len(list(cache.rglob("*.clbin"))) == 3
    proc = clmagic("prune", "--max-size", str(sizes[-1] + 10), "--json", cache=cache)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["entries"] == 2 and report["left_entries"] == 1
    assert len(list(cache.rglob("*.clbin"))) == 1
    text = clmagic("prune", "--older-than", "1s", cache=cache)
    assert text.returncode == 0 and "evicted 1 entry" in text.stdout
    assert json.loads(clmagic("stats", "--json", cache=cache).stdout)["lifetime"][
        "evictions"] == 3


def test_prune_below_the_largest_entry_evicts_down_to_it_as_ccache_does(cache):
    """A size smaller than any entry is what the user asked for: every entry goes, and the
    command says how many, how much, and what is left."""
    proc = clmagic("prune", "--max-size", "1K", cache=cache)
    assert proc.returncode == 0, proc.stderr
    evicted, left = proc.stdout.splitlines()
    assert evicted.startswith("evicted 3 entries (") and evicted.endswith("(down to 1K = 1000 B)")
    assert left == "left: 0 entries, 0 B"
    assert not list(cache.rglob("*.clbin"))


def test_export_then_import_into_another_cache(cache, tmp_path):
    bundle = tmp_path / "course.db"
    out = clmagic("export", str(bundle), cache=cache)
    assert out.returncode == 0 and "exported 3 entries" in out.stdout
    one_line_error(clmagic("export", str(bundle), cache=cache), 2, "exists")
    assert clmagic("export", str(bundle), "--force", "--json", cache=cache).returncode == 0
    fresh = tmp_path / "fresh"
    imp = clmagic("import", str(bundle), "--json", cache=fresh)
    assert imp.returncode == 0 and json.loads(imp.stdout)["imported"] == 3
    again = clmagic("import", str(bundle), cache=fresh)
    assert again.returncode == 0 and "skipped 3" in again.stdout


def test_config_shows_every_setting_with_its_origin(tmp_path):
    proc = clmagic("config", cache=tmp_path, CLMAGIC_CACHE_MAX_SIZE="2G")
    assert proc.returncode == 0
    for var in ("CLMAGIC_CACHE_DIR", "CLMAGIC_CACHE_MAX_SIZE", "CLMAGIC_MEMORY_MAX",
                "CLMAGIC_REMOTE", "CLMAGIC_DEVICE", "CLMAGIC_RECORD"):
        assert var in proc.stdout
    rows = {r["setting"]: r for r in json.loads(
        clmagic("config", "--json", cache=tmp_path, CLMAGIC_CACHE_MAX_SIZE="2G").stdout)}
    assert rows["max_size"]["value"] == "2000000000 bytes"
    assert rows["max_size"]["origin"] == "environment (CLMAGIC_CACHE_MAX_SIZE)"
    assert rows["memory_max"]["origin"] == "default"


def test_memory_only_cache_is_bad_input(tmp_path):
    one_line_error(clmagic("ls", cache="off"), 2, "memory only")
    one_line_error(clmagic("prune", "--max-size", "1G", cache="off"), 2, "memory only")


@pytest.mark.skipif(not can_drop_dac(), reason="cannot make a child obey file permissions")
@pytest.mark.parametrize("args", [("clear", "--yes"), ("prune", "--max-size", "1"),
                                  ("import", "BUNDLE"), ("warm", "KERNELS")])
def test_a_cache_that_cannot_be_written_is_exit_1_and_nothing_changes(args, cache, kernels,
                                                                      tmp_path):
    bundle = tmp_path / "b.db"
    assert clmagic("export", str(bundle), cache=cache).returncode == 0
    args = [str(bundle) if a == "BUNDLE" else str(kernels) if a == "KERNELS" else a
            for a in args]
    for p in [cache, *cache.rglob("*")]:
        p.chmod(p.stat().st_mode & ~0o222)
    try:
        proc = clmagic(*args, cache=cache, preexec=drop_dac)
    finally:
        for p in [cache, *cache.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o200)
    one_line_error(proc, 1, "cannot be written")
    assert len(list(cache.rglob("*.clbin"))) == 3


def test_ctrl_c_during_warm_keeps_what_was_built_and_tears_nothing(tmp_path, pocl):
    folder = tmp_path / "many"
    folder.mkdir()
    for n in range(12):
        (folder / f"m{n}.cl").write_text(KERNEL.format(name=f"m{n}", n=n))
    cache = tmp_path / "cache"
    proc = subprocess.Popen([sys.executable, "-m", "clmagic", "warm", str(folder), "--jobs", "2",
                             "--device", pocl, "--json"],
                            env=child_env(CLMAGIC_CACHE_DIR=str(cache)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 240
    while not list(cache.rglob("*.clbin")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 130, err
    report = json.loads(out)
    assert report["interrupted"] and report["skipped"] > 0 and report["failed"] == []
    files = list(cache.rglob("*.clbin"))
    assert len(files) == len(report["built"]) >= 1
    for f in files:  # every entry whole
        decode(f.read_bytes())
    assert not [p for p in cache.rglob("*") if ".tmp." in p.name]
    resumed = clmagic("warm", str(folder), "--device", pocl, "--json", cache=cache)
    again = json.loads(resumed.stdout)
    assert len(again["cached"]) == len(files) and len(again["built"]) == 12 - len(files)
