"""One file layer (issue 34, class 3): every file under the cache's folders is opened, read and
written through :mod:`clmagic.store._fs` — no FIFO waited on, no symlink followed, sizes
bounded, files 0600 in 0700 folders, written whole.

The scan fails on any other ``open`` (built-in, ``io.open``, ``os.open``, ``Path.open``) or
``read_text``/``write_text``/``read_bytes``/``write_bytes`` in clmagic's source; the hostile
tests plant a FIFO, a symlink, a giant, broken JSON and rows of the wrong shape where a sweep
keeps its results, and each reads as "no results" at once; a results file is written 0600,
replacing (never following) a symlink planted at its name.
"""

from __future__ import annotations

import ast
import json
import os
import re
import stat
from pathlib import Path

import pytest

from clmagic.store import _fs

PACKAGE = Path(__file__).resolve().parents[2] / "clmagic"
FS = "clmagic/store/_fs.py"
#: opens outside _fs of files that are not under the cache's folders: module → {the call (as
#: ast.unparse writes it): why}
ALLOWED = {
    "clmagic/opencl/patience.py": {
        "open(f'/proc/{pid}/stat', 'rb')": "the kernel's view of a helper process (procfs)"},
    "clmagic/opencl/driver.py": {
        "open('/proc/self/maps', encoding='utf-8', errors='replace')":
            "which driver libraries this process has mapped (procfs)"},
    "clmagic/opencl/driver_env.py": {
        "open('/proc/self/maps', 'rb')": "which driver libraries this process has mapped",
        "open('/proc/self/environ', 'rb')": "the environment the process started with"},
    "clmagic/cli/main.py": {
        "os.open(os.devnull, os.O_WRONLY)": "`clmagic run --quiet`'s stdout sent to /dev/null"},
    "clmagic/cache/checker/run.py": {
        "log.open('rb')": "Oclgrind's log, in the check's own TemporaryDirectory"},
}
#: methods that open a path whatever their receiver (pathlib's, and any look-alike)
_METHODS = {"read_text", "write_text", "read_bytes", "write_bytes", "open"}
#: receivers whose ``open`` is a store's constructor, not a file's
_STORE_OPENERS = {"RedisStore", "SQLiteStore", "DirectoryStore", "cls"}


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def file_opens(source: str) -> list[str]:
    """Each call in ``source`` that opens a file by its path, as written."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "open":
            found.append(ast.unparse(node))
        elif isinstance(f, ast.Attribute) and f.attr in _METHODS:
            base = f.value
            if f.attr == "open" and isinstance(base, ast.Name) and base.id in _STORE_OPENERS:
                continue
            found.append(ast.unparse(node))
    return found


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=_rel)
def test_no_file_is_opened_but_through_the_safe_layer(path: Path) -> None:
    if _rel(path) == FS:
        return
    allowed = ALLOWED.get(_rel(path), {})
    opens = [o for o in file_opens(path.read_text(encoding="utf-8")) if o not in allowed]
    assert not opens, (f"{_rel(path)} opens a file outside clmagic.store._fs: "
                       + "; ".join(opens) + " (use _fs.read_regular/read_json/create_new/"
                       "write_private/open_file, or allow it here with why it is not a file "
                       "under the cache's folders)")


def test_the_allowed_opens_are_there() -> None:
    """Each allowance names a call that exists (a stale one would allow a new open)."""
    for module, calls in ALLOWED.items():
        path = PACKAGE.parent / module
        if path.exists():  # (a module being written may not be there yet)
            assert set(calls) <= set(file_opens(path.read_text(encoding="utf-8"))), module


def test_the_scan_sees_every_way_of_opening() -> None:
    probe = '''
import io, os
from pathlib import Path
open("x"); io.open("x"); os.open("x", 0); Path("x").open(); Path("x").read_text()
p.write_text("y"); p.read_bytes(); p.write_bytes(b""); self.path.open("rb")
DirectoryStore.open("x"); cls.open("x"); os.fdopen(3); os.path.exists("x")
'''
    assert file_opens(probe) == [
        "open('x')", "io.open('x')", "os.open('x', 0)", "Path('x').open()",
        "Path('x').read_text()", "p.write_text('y')", "p.read_bytes()", "p.write_bytes(b'')",
        "self.path.open('rb')"]


# -- the safe readers and writers themselves ----------------------------------------------------

@pytest.mark.timeout(30)
def test_read_json_is_none_for_anything_but_a_bounded_json_file(tmp_path: Path) -> None:
    """A FIFO (no writer: it would block for ever), a symlink to good JSON, a folder, a giant,
    bytes that are not UTF-8, NaN, nesting past the parser, broken text: each ``None``, at
    once; a good file reads."""
    good = tmp_path / "good.json"
    good.write_text('{"a": [1, 2.5, "x"]}')
    assert _fs.read_json(good, 100) == {"a": [1, 2.5, "x"]}
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(good)
    (tmp_path / "folder").mkdir()
    (tmp_path / "giant").write_text('{"a": "' + "x" * 200 + '"}')
    (tmp_path / "latin").write_bytes(b'{"a": "\xff"}')
    (tmp_path / "nan").write_text('{"a": NaN}')
    (tmp_path / "deep").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "broken").write_text('{"a": ')
    for name in ("fifo", "link", "folder", "giant", "latin", "nan", "deep", "broken", "gone"):
        assert _fs.read_json(tmp_path / name, 100 if name == "giant" else 1 << 20) is None, name


def test_write_private_replaces_a_planted_symlink_and_writes_0600(tmp_path: Path) -> None:
    """Whatever the umask lets through, the file is 0600; a symlink at its name is replaced
    (its target untouched), a FIFO too; a temp name already taken (a FIFO planted there) fails
    the write instead of opening it."""
    target = tmp_path / "elsewhere"
    target.write_text("theirs")
    path = tmp_path / "results.json"
    path.symlink_to(target)
    old = os.umask(0)
    try:
        _fs.write_private(path, b"ours")
    finally:
        os.umask(old)
    assert target.read_text() == "theirs" and not path.is_symlink()
    assert path.read_bytes() == b"ours" and stat.S_IMODE(path.stat().st_mode) == 0o600
    os.unlink(path)
    os.mkfifo(path)
    _fs.write_private(path, b"again")
    assert path.read_bytes() == b"again"
    os.mkfifo(tmp_path / "taken")
    with pytest.raises(FileExistsError):
        _fs.write_private(path, b"never", tmp_path / "taken")
    assert path.read_bytes() == b"again" and stat.S_ISFIFO(os.lstat(tmp_path / "taken").st_mode)


def test_create_new_opens_nothing_that_is_there(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")  # dangling: O_CREAT would follow it
    os.mkfifo(tmp_path / "fifo")
    for name in ("file", "link", "fifo"):
        with pytest.raises(FileExistsError):
            _fs.create_new(tmp_path / name)
    assert not (tmp_path / "nowhere").exists()
    os.close(_fs.create_new(tmp_path / "new"))
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o600


# -- a sweep's results file (sweeps/<id>.json) ---------------------------------------------------

SRC = "__kernel void k(__global int *a) { a[0] = V; }"
PARAMS = {"V": [1, 2]}


def _sweep(compiler, pocl: str):
    """A sweep of two variants, each 'timed' at 5 µs: the run, and how many launches it made."""
    from clmagic.cache.sweep import sweep_run

    launches = []

    def run(result: object) -> float:
        launches.append(result)
        return 5.0

    return sweep_run(SRC, PARAMS, run, device=pocl, compiler=compiler, jobs=1), len(launches)


@pytest.fixture
def results(tmp_path: Path, pocl: str):
    """A compiler over a directory store, and the results file of its first sweep."""
    import clmagic

    compiler = clmagic.Compiler(settings=clmagic.Settings.from_env(
        {"CLMAGIC_CACHE_DIR": str(tmp_path / "cache"), "CLMAGIC_DEVICE": pocl}))
    first, launched = _sweep(compiler, pocl)
    assert launched == 2 and first.results is not None and first.results.is_file()
    return compiler, first.results


def test_the_results_file_is_private_and_resumes(results, pocl: str) -> None:
    compiler, path = results
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    again, launched = _sweep(compiler, pocl)
    assert launched == 0 and all(v.resumed for v in again.variants)  # the control case


def _doc(rows: object) -> str:
    return json.dumps({"version": 1, "rows": rows})


def _bad_rows(path: Path) -> dict[str, object]:
    """The file's own rows (keys kept) with one field made wrong each way."""
    rows = json.loads(path.read_text())["rows"]
    keys = list(rows)
    bad: list[object] = [{**rows[keys[0]], "min_us": "x"}, {**rows[keys[1]], "median_us": "5"}]
    return {keys[0]: bad[0], keys[1]: bad[1]}


HOSTILE = {
    "fifo": lambda path, tmp: os.mkfifo(path),
    "folder": lambda path, tmp: path.mkdir(),
    "giant": lambda path, tmp: path.write_text(path.read_text() + " " * (17 << 20)),
    "broken json": lambda path, tmp: path.write_text(path.read_text()[:-7]),
    "not utf-8": lambda path, tmp: path.write_bytes(path.read_bytes().replace(b'"', b"\xff", 1)),
    "NaN": lambda path, tmp: path.write_text(path.read_text().replace("5.0", "NaN")),
    "huge integer": lambda path, tmp: path.write_text(path.read_text().replace("5.0",
                                                                               "9" * 401)),
    "wrong values": lambda path, tmp: path.write_text(_doc(_bad_rows(path))),
    "rows as a list": lambda path, tmp: path.write_text(_doc([1, 2])),
    "row as a number": lambda path, tmp: path.write_text(
        _doc(dict.fromkeys(json.loads(path.read_text())["rows"], 7))),
    "params as text": lambda path, tmp: path.write_text(
        re.sub(r'"params": \{[^}]*\}', '"params": "V"', path.read_text())),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", sorted([*HOSTILE, "symlink"]))
def test_a_hostile_results_file_reads_as_none_and_is_replaced(how, results, pocl,
                                                              tmp_path) -> None:
    """Each planted thing at ``sweeps/<id>.json`` reads as "no timings kept": the sweep times
    every variant again, raises nothing, hangs on nothing, and leaves a good file (0600) in
    its place — except a folder squatting the name, which is left (the timings not kept)."""
    compiler, path = results
    saved = path.read_text()
    target = tmp_path / "elsewhere.json"
    if how == "symlink":  # good timings behind a link: not followed, not written through
        target.write_text(saved)
        path.unlink()
        path.symlink_to(target)
    else:
        if how in ("fifo", "folder"):
            path.unlink()
        HOSTILE[how](path, target)
    again, launched = _sweep(compiler, pocl)
    assert launched == 2 and not any(v.resumed for v in again.variants)
    assert [v.median_us for v in again.variants] == [5.0, 5.0]
    if how == "folder":
        assert path.is_dir()
        return
    assert not path.is_symlink() and path.is_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    timings = {k: r["median_us"] for k, r in json.loads(path.read_text())["rows"].items()}
    assert timings == {k: r["median_us"] for k, r in json.loads(saved)["rows"].items()}
    if how == "symlink":
        assert target.read_text() == saved  # the link's target untouched


def test_a_symlinked_sweeps_folder_is_neither_read_nor_written(results, pocl, tmp_path):
    compiler, path = results
    elsewhere = tmp_path / "their-sweeps"
    path.parent.rename(elsewhere)
    path.parent.symlink_to(elsewhere)
    before = {p.name: p.read_bytes() for p in elsewhere.iterdir()}
    again, launched = _sweep(compiler, pocl)
    assert launched == 2 and not any(v.resumed for v in again.variants)
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before


# -- the other writers routed through _fs ------------------------------------------------------

def test_zeroing_the_lifetime_counts_replaces_a_planted_symlink(tmp_path: Path) -> None:
    """The zero file is written whole (0600) over a symlink planted at its name, whose target
    keeps its bytes; the counts read back as zero."""
    from clmagic.store.lifetime import Counters

    folder = tmp_path / "stats"
    counters = Counters(folder)
    counters.add("fp", "HIT", 3)
    counters.flush()
    target = tmp_path / "theirs"
    target.write_bytes(b"keep")
    (folder / "zero").symlink_to(target)
    assert counters.zero() is True
    assert target.read_bytes() == b"keep" and not (folder / "zero").is_symlink()
    assert stat.S_IMODE((folder / "zero").stat().st_mode) == 0o600
    assert counters.lifetime() == {}
    counters.close()


def test_a_code_index_is_written_over_a_planted_symlink(tmp_path: Path, pocl: str) -> None:
    """The directory store's code index (``<code key>.code``) replaces a symlink planted at its
    name (the link's target untouched), 0600."""
    import clmagic
    from clmagic.store import DirectoryStore

    store = DirectoryStore(tmp_path / "cache")
    compiler = clmagic.Compiler(store=store)
    src = "__kernel void k(__global int *a) { a[0] = 3; }"
    r = compiler.build(src, device=pocl)
    assert r.saved
    index = next((tmp_path / "cache").rglob("*.code"))
    target = tmp_path / "theirs"
    target.write_bytes(b"keep")
    index.unlink()
    index.symlink_to(target)
    compiler.store.put(compiler.store.get(r.device.fingerprint, r.key))
    assert target.read_bytes() == b"keep" and not index.is_symlink()
    assert index.read_text() == r.key and stat.S_IMODE(index.stat().st_mode) == 0o600
