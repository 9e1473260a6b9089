"""Preparations remembered across processes (clmagic.key.manifest, ccache's direct mode): a new
process takes the key from the manifest without reading a header, and never one that a full
preparation would not compute; a damaged, hostile or stale manifest is a preparation again."""

from __future__ import annotations

import dataclasses
import os

import pyopencl as cl
import pytest
from conftest import kernel_value
from test_hit_path import MAIN, project, settle  # noqa: F401 - project is a fixture

import clmagic.key.prepare as prepare_module
from clmagic import Compiler, Outcome
from clmagic.config import Settings
from clmagic.key import manifest as manifest_module
from clmagic.key import stamps
from clmagic.key.manifest import FORMAT, Manifest
from clmagic.key.prepare import complete

PLAIN = "__kernel void k(__global int *a) { a[get_global_id(0)] = 5; }  \r\n"


@pytest.fixture
def spied(monkeypatch):
    """How often a full preparation searched includes (counts ``find_headers`` calls)."""
    calls = []
    real = prepare_module.find_headers

    def find_headers(*args, **kw):
        calls.append(args[0])
        return real(*args, **kw)

    monkeypatch.setattr(prepare_module, "find_headers", find_headers)
    return calls


def new_process(settings: Settings) -> Compiler:
    """A compiler as a new process has it: nothing in memory, the manifest read from its file."""
    return Compiler(settings)


def manifest_path(cache_dir):
    return cache_dir / "stats" / "manifest"


def built_once(settings, source=MAIN, options="-Iinc") -> None:
    first = Compiler(settings)
    r = first.build(source, options)
    assert r.outcome == Outcome.MISS
    first.flush()


def test_a_new_process_takes_the_key_from_the_manifest_and_reads_no_header(
        project, settings, spied):
    built_once(settings)
    spied.clear()
    c = new_process(settings)
    info = c.resolve()[0]
    prep = c.state.prepare(MAIN, "-Iinc", info)
    assert not spied and prep.partial is not None  # no include search, no header read
    full = complete(prep, info)
    assert spied and (full.key, full.source, full.headers) == (prep.key, prep.source,
                                                               prep.headers)
    r = new_process(settings).build(MAIN, "-Iinc")
    assert r.outcome == Outcome.HIT and kernel_value(r) == 41


def test_a_source_that_includes_nothing_is_whole_from_the_manifest(project, settings, spied):
    built_once(settings, PLAIN, "")
    spied.clear()
    c = new_process(settings)
    prep = c.state.prepare(PLAIN, "", c.resolve()[0])
    assert not spied and prep.partial is None and prep.source.endswith("5; }\n")
    assert prep.source != PLAIN  # normalised as a full preparation normalises it
    r = c.build(PLAIN.encode(), "")  # bytes are other arguments: prepared, the same key
    assert r.outcome == Outcome.HIT and r.record.key == prep.key and kernel_value(r) == 5


@pytest.mark.parametrize("source", [PLAIN, PLAIN.encode(), MAIN])
def test_a_preparation_from_the_manifest_is_what_a_full_one_makes(project, settings, source):
    """Every field a record or a build reads (the text the compiler reads, its bytes, its size,
    preview, headers, key), whether the text is made when asked or at once."""
    options = "-Iinc" if source is MAIN else ""
    built_once(settings, source, options)
    c = new_process(settings)
    info = c.resolve()[0]
    prep = c.state.prepare(source, options, info)
    full = complete(dataclasses.replace(prep, partial=(source, options)), info)
    assert prep is not full and full.partial is None
    for name in ("source", "src", "size", "preview", "headers", "key"):
        assert getattr(prep, name) == getattr(full, name), name
    assert prep.size == len(prep.src) and prep.src == prep.source.encode()


@pytest.mark.parametrize("edit", ["same size and mtime", "a header earlier in the search",
                                  "the working folder"])
def test_what_changed_between_processes_is_seen(project, settings, edit, tmp_path):
    built_once(settings)
    header = project / "inc" / "params.h"
    if edit == "same size and mtime":
        st = header.stat()
        header.write_text("#define VAL 57\n")
        os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))  # only ctime moves
        want = 57
    elif edit == "a header earlier in the search":
        (project / "params.h").write_text("#define VAL 7\n")  # found before -Iinc
        want = 7
    else:
        other = tmp_path / "other"
        (other / "inc").mkdir(parents=True)
        (other / "inc" / "params.h").write_text("#define VAL 9\n")
        os.chdir(other)
        want = 9
    settle()
    r = new_process(settings).build(MAIN, "-Iinc")
    assert r.outcome == Outcome.MISS and kernel_value(r) == want


def test_a_header_too_new_to_trust_is_read_again(project, settings, spied, monkeypatch):
    built_once(settings)
    monkeypatch.setattr(stamps, "TOO_NEW_NS", 10**18)  # every file now counts as too new
    spied.clear()
    r = new_process(settings).build(MAIN, "-Iinc")
    assert spied and r.outcome == Outcome.HIT


def test_a_partial_preparation_is_completed_before_a_miss_builds_and_saves(
        project, settings, cache_dir):
    built_once(settings)
    for entry in cache_dir.rglob("*.clbin"):
        entry.unlink()
    c = new_process(settings)
    r = c.build(MAIN, "-Iinc")
    assert r.outcome == Outcome.MISS and kernel_value(r) == 41
    assert r.record.headers == ('"params.h" @-Iinc',) and r.saved
    again = new_process(settings).build(MAIN, "-Iinc")
    assert again.outcome == Outcome.HIT and again.record.key == r.record.key


def test_the_hook_path_completes_a_partial_preparation_on_a_miss(project, settings, cache_dir):
    built_once(settings)
    for entry in cache_dir.rglob("*.clbin"):
        entry.unlink()
    c = new_process(settings)
    ctx = cl.Context([c.resolve()[1]])
    got = c.build_program(ctx, MAIN, "-Iinc")
    assert got.outcome == Outcome.MISS and got.records[0].headers == ('"params.h" @-Iinc',)
    c.flush()
    hit = new_process(settings).build_program(ctx, MAIN, "-Iinc")
    assert hit.outcome == Outcome.HIT and hit.records[0].key == got.records[0].key


def test_a_source_that_reads_the_clock_is_never_remembered(project, settings, cache_dir):
    built_once(settings)
    before = manifest_path(cache_dir).read_bytes()
    clock = "__kernel void k(__global int *a) { a[0] = sizeof(__TIME__); }\n"
    assert new_process(settings).build(clock).outcome == Outcome.BYPASS
    assert manifest_path(cache_dir).read_bytes() == before


def _lines(path):
    return [line for line in path.read_bytes().split(b"\n")[1:] if len(line) > 64]


@pytest.mark.parametrize("damage", ["a flipped byte", "a line under another name",
                                    "a truncated line", "another format", "another code"])
def test_a_damaged_or_stale_manifest_is_a_preparation_again(project, settings, cache_dir,
                                                            spied, damage):
    built_once(settings)
    built_once(settings, PLAIN, "")
    path = manifest_path(cache_dir)
    head, *rest = path.read_bytes().split(b"\n")
    one, two = _lines(path)
    if damage == "a flipped byte":
        bad = one[:80] + bytes([one[80] ^ 1]) + one[81:]
        path.write_bytes(b"\n".join([head, bad, two, b""]))
    elif damage == "a line under another name":
        path.write_bytes(b"\n".join([head, one[:32] + two[32:], b""]))  # PLAIN's under MAIN's
    elif damage == "a truncated line":
        path.write_bytes(b"\n".join([head, one[:-9], two[:-1], b""]))
    elif damage == "another format":
        path.write_bytes(b"\n".join([head.replace(FORMAT.encode(), b"clmagic-manifest-0"),
                                     *rest]))
    else:
        path.write_bytes(b"\n".join([head[:-4] + b"beef", *rest]))
    spied.clear()
    c = new_process(settings)
    r = c.build(MAIN, "-Iinc")
    assert spied and r.outcome == Outcome.HIT and kernel_value(r) == 41
    assert c.build(PLAIN, "").outcome == Outcome.HIT
    if damage.startswith("another"):  # replaced by a file of this code, with the new line
        assert path.read_bytes().split(b"\n")[0] == Manifest(path)._head()


@pytest.mark.parametrize("plant", ["fifo", "folder", "writable by others", "giant"])
def test_a_planted_manifest_neither_hangs_nor_is_trusted(project, settings, cache_dir, spied,
                                                         plant, capfd):
    built_once(settings)
    path = manifest_path(cache_dir)
    path.unlink()
    if plant == "fifo":
        os.mkfifo(path)
    elif plant == "folder":
        path.mkdir()
    elif plant == "giant":
        path.write_bytes(b"x" * (2 * manifest_module.MAX_BYTES + 1))  # not read at all
    else:
        built_once(settings, PLAIN, "")  # a real line for MAIN is lost with it
        path.write_bytes(path.read_bytes())
        path.chmod(0o666)
    spied.clear()
    capfd.readouterr()
    r = new_process(settings).build(MAIN, "-Iinc")
    assert spied and r.outcome == Outcome.HIT and kernel_value(r) == 41
    said = capfd.readouterr().err
    assert said.count("\n") == (plant == "writable by others")  # one line, or none
    if plant == "writable by others":
        assert "manifest" in said and "not private to you" in said
    if plant != "folder":  # replaced by a private regular file holding the new line
        assert path.is_file() and (path.stat().st_mode & 0o777) == 0o600 and _lines(path)


def test_the_file_stays_bounded(project, settings, cache_dir, monkeypatch):
    monkeypatch.setattr(manifest_module, "MAX_BYTES", 2000)
    c = Compiler(settings)
    for i in range(30):
        c.build(PLAIN.replace("5;", f"{i};"), "")
    size = manifest_path(cache_dir).stat().st_size
    assert size <= 2000 and len(_lines(manifest_path(cache_dir))) >= 3
    last = PLAIN.replace("5;", "29;")
    assert new_process(settings).build(last, "").outcome == Outcome.HIT


def test_only_a_private_store_keeps_a_manifest(tmp_path):
    from clmagic.store.directory.store import DirectoryStore
    from clmagic.store.sqlite.store import SQLiteStore

    private = DirectoryStore(tmp_path / "c")
    assert private.manifest_file == tmp_path / "c" / "stats" / "manifest"
    shared = DirectoryStore(tmp_path / "s")
    shared.shared = True
    assert shared.manifest_file is None
    db = SQLiteStore(tmp_path / "cache.db")
    assert db.manifest_file == tmp_path / "cache.db.stats" / "manifest"
    db.close()
