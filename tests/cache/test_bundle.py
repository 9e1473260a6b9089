"""Bundles: export a warmed cache to one file, import it elsewhere as untrusted input."""

from __future__ import annotations

import json
import sqlite3

import pytest
from conftest import SAXPY, last_json, run_child
from stores import synthetic

import clmagic
from clmagic.cache import bundle as bundle_mod
from clmagic.config import Settings
from clmagic.errors import ClmagicError
from clmagic.show import html_of, text_of
from clmagic.store import DirectoryStore, open_store

OTHER = SAXPY.replace("a * x[i]", "x[i] * a")

CHILD = """
import json, os, clmagic
r = clmagic.build(os.environ["SRC"], None, os.environ["DEV"])
print(json.dumps({"outcome": r.outcome, "kernels": sorted(r.kernels)}))
"""


@pytest.fixture
def warmed(tmp_path, pocl, oclgrind):
    """A cache with two programs for POCL and one for Oclgrind, and its compiler."""
    comp = clmagic.Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(tmp_path / "src")}))
    comp.build(SAXPY, None, pocl)
    comp.build(OTHER, None, pocl)
    comp.build("__kernel void only(__global int *a) { a[0] = 7; }", None, oclgrind)
    return comp


def test_export_writes_entries_and_manifest(warmed, tmp_path, pocl, oclgrind):
    path = tmp_path / "course.clbundle"
    report = clmagic.export_bundle(path, store=warmed.store)
    assert report.entries == 3 and len(report.devices) == 2
    with sqlite3.connect(path) as db:
        manifest = {k: json.loads(v) for k, v in db.execute("SELECT name, value FROM manifest")}
        keys = {r[0] for r in db.execute("SELECT key FROM entries")}
    db.close()
    assert manifest["clmagic"] == clmagic.__version__ and manifest["entries"] == 3
    fps = {d["fingerprint"]: d["entries"] for d in manifest["devices"]}
    assert fps == {clmagic.resolve_device(pocl)[0].fingerprint: 2,
                   clmagic.resolve_device(oclgrind)[0].fingerprint: 1}
    assert keys == {e.key for e in warmed.store.entries()}
    assert "3 entries" in html_of(report)
    only_pocl = clmagic.export_bundle(tmp_path / "p.db", device=pocl, store=warmed.store)
    only_k = clmagic.export_bundle(tmp_path / "k.db", kernels="only", store=warmed.store)
    assert (only_pocl.entries, only_k.entries) == (2, 1)
    with pytest.raises(ClmagicError, match="exists"):
        clmagic.export_bundle(path, store=warmed.store)


def test_import_into_a_fresh_cache_gives_hits_in_another_process(warmed, tmp_path, pocl):
    path = tmp_path / "b.db"
    clmagic.export_bundle(path, store=warmed.store)
    fresh = open_store(str(tmp_path / "fresh"))
    report = clmagic.import_bundle(path, store=fresh)
    assert (report.imported, report.skipped, report.failed) == (3, 0, 0)
    assert report.missing_devices == {} and report.manifest["entries"] == 3
    out = last_json(run_child(CHILD, SRC=SAXPY, DEV=pocl,
                              CLMAGIC_CACHE_DIR=str(tmp_path / "fresh")))
    assert out == {"outcome": "HIT", "kernels": ["saxpy", "scale"]}
    again = clmagic.import_bundle(path, store=fresh)
    assert (again.imported, again.skipped, again.failed) == (0, 3, 0)
    assert "skipped 3" in text_of(again) and "skipped 3" in html_of(again)


def test_import_never_overwrites_a_local_entry(tmp_path):
    src, local = DirectoryStore(tmp_path / "src"), DirectoryStore(tmp_path / "local")
    theirs, mine = synthetic(1), synthetic(1)
    src.put(theirs)
    local.put(mine)
    clmagic.export_bundle(tmp_path / "b.db", store=src)
    report = clmagic.import_bundle(tmp_path / "b.db", store=local)
    assert (report.imported, report.skipped) == (0, 1)
    assert local.get(mine.fingerprint, mine.key).binary == mine.binary != theirs.binary


def test_import_treats_the_file_as_untrusted(tmp_path, monkeypatch):
    src = DirectoryStore(tmp_path / "src")
    entries = [synthetic(i, size=300) for i in range(5)]
    src.put_many(entries)
    path = tmp_path / "b.db"
    clmagic.export_bundle(path, store=src)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE entries SET binary = zeroblob(300) WHERE key = ?", (entries[0].key,))
        db.execute("UPDATE entries SET key = '../../etc/passwd' WHERE key = ?",
                   (entries[1].key,))
        db.execute("UPDATE entries SET kernels = '{\"not\": \"a list\"}' WHERE key = ?",
                   (entries[2].key,))
        db.execute("UPDATE entries SET binary = zeroblob(5000) WHERE key = ?", (entries[3].key,))
    db.close()
    monkeypatch.setattr(bundle_mod, "MAX_BINARY", 4096)  # entry 3 is over the bound
    local = DirectoryStore(tmp_path / "local")
    report = clmagic.import_bundle(path, store=local)
    assert (report.imported, report.skipped, report.failed) == (1, 0, 4)
    text = " ".join(report.reasons)
    assert "checksum" in text and "malformed name" in text and "size limits" in text
    assert [e.key for e in local.entries()] == [entries[4].key]
    assert not (tmp_path / "etc").exists()


@pytest.mark.parametrize("content", [b"not a database at all", b""])
def test_import_refuses_files_that_are_not_bundles(tmp_path, content):
    path = tmp_path / "x.db"
    path.write_bytes(content)
    with pytest.raises(ClmagicError, match="not a clmagic bundle"):
        clmagic.import_bundle(path, store=DirectoryStore(tmp_path / "local"))
    with sqlite3.connect(tmp_path / "view.db") as db:  # a view posing as the entries table
        db.execute("CREATE TABLE clmagic_schema (version INTEGER)")
        db.execute("CREATE TABLE manifest (name TEXT, value TEXT)")
        db.execute("CREATE VIEW entries AS SELECT 1 AS format")
    db.close()
    with pytest.raises(ClmagicError, match="tables missing"):
        clmagic.import_bundle(tmp_path / "view.db", store=DirectoryStore(tmp_path / "local"))


def test_entries_for_devices_this_machine_lacks_are_kept_and_reported(tmp_path):
    src = DirectoryStore(tmp_path / "src")
    src.put_many([synthetic(1), synthetic(2)])  # a fingerprint no device here has
    clmagic.export_bundle(tmp_path / "b.db", store=src)
    local = DirectoryStore(tmp_path / "local")
    report = clmagic.import_bundle(tmp_path / "b.db", store=local)
    assert report.imported == 2 and len(list(local.entries())) == 2
    (fp, info), = report.missing_devices.items()
    assert fp == synthetic(1).fingerprint and info["entries"] == 2
    assert "Synthetic Device" in text_of(report) and "not on this machine" in html_of(report)


def test_clcache_export_and_import_through_the_magic(ipshell, tmp_path, pocl):
    """%clcache export PATH / import PATH: the same as the library calls, one line on misuse."""
    from IPython.utils.capture import capture_output

    from clmagic import Compiler
    from clmagic.config import Settings
    from clmagic.ipython.magics import CLMagics

    def use(cache):
        s = Settings.from_env({"CLMAGIC_CACHE_DIR": str(cache), "CLMAGIC_DEVICE": pocl})
        ipshell.register_magics(CLMagics(shell=ipshell, compiler=Compiler(s)))

    use(tmp_path / "a")
    assert ipshell.run_cell("%%clkernel --quiet\n__kernel void k(__global int *a) "
                            "{ a[0] = 7; }").success
    bundle = tmp_path / "course.db"
    exported = ipshell.run_line_magic("clcache", f"export {bundle}")
    assert exported.entries == 1 and bundle.exists()
    use(tmp_path / "b")
    imported = ipshell.run_line_magic("clcache", f"import {bundle}")
    assert imported.imported == 1
    again = ipshell.run_line_magic("clcache", f"import {bundle}")
    assert again.imported == 0 and again.skipped == 1
    with capture_output() as cap:
        res = ipshell.run_cell("%clcache export")
    assert not res.success and "usage: %clcache export PATH" in cap.stdout + cap.stderr


def test_hostile_bundles_fail_cleanly(tmp_path, pocl):
    """Deep JSON nesting and oversized text columns are reported, never raised."""
    import sqlite3

    from clmagic import Compiler, export_bundle, import_bundle
    from clmagic.config import Settings

    s = Settings.from_env({"CLMAGIC_CACHE_DIR": str(tmp_path / "a"), "CLMAGIC_DEVICE": pocl})
    c = Compiler(s)
    c.build("__kernel void k(__global int *a) { a[0] = 1; }")
    c.build("__kernel void j(__global int *a) { a[0] = 2; }")
    path = tmp_path / "b.db"
    export_bundle(path, store=c.store)
    conn = sqlite3.connect(path)
    keys = [k for (k,) in conn.execute("SELECT key FROM entries ORDER BY key")]
    conn.execute("UPDATE entries SET extra = ? WHERE key = ?", ("[" * 200_000, keys[0]))
    conn.execute("UPDATE entries SET device = ? WHERE key = ?", ("x" * (3 << 20), keys[1]))
    conn.execute("UPDATE manifest SET value = ? WHERE name = 'clmagic'", ("[" * 200_000,))
    conn.commit()
    conn.close()
    other = Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(tmp_path / "c")}))
    report = import_bundle(path, store=other.store)
    assert report.imported == 0 and report.failed == 2, report.reasons
    assert not list(other.store.entries())


def test_export_to_an_unwritable_path_is_one_clear_error(tmp_path, pocl):
    from clmagic import ClmagicError, Compiler, export_bundle
    from clmagic.config import Settings

    c = Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(tmp_path / "a"),
                                    "CLMAGIC_DEVICE": pocl}))
    c.build("__kernel void k(__global int *a) { a[0] = 1; }")
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(ClmagicError, match="cannot write the bundle"):
        export_bundle(tmp_path / "file" / "x.db", store=c.store)


# -- imported binaries proven as they are imported ----------------------------------------------

IMPORT_CHILD = """
import json, os, clmagic
from clmagic.opencl import vet
from clmagic.show import text_of
proofs, prove = [], vet.prove
def counted(fingerprint, *args, **kwargs):  # every child that proves a binary, counted
    proofs.append(fingerprint)
    return prove(fingerprint, *args, **kwargs)
vet.prove = counted
steps = []
r = clmagic.import_bundle(os.environ["BUNDLE"], progress=lambda *s: steps.append(s))
print(json.dumps({"imported": r.imported, "proven": r.proven, "failed": r.failed,
                  "proofs": sorted(proofs), "steps": steps, "text": text_of(r)}))
"""

HIT_CHILD = """
import json, os, clmagic
from clmagic.opencl import vet
proofs, prove = [], vet.prove
def counted(fingerprint, *args, **kwargs):
    proofs.append(fingerprint)
    return prove(fingerprint, *args, **kwargs)
vet.prove = counted
r = clmagic.build(os.environ["SRC"], None, os.environ["DEV"])
print(json.dumps({"outcome": r.outcome, "proofs": proofs, "once": r.record.once_what,
                  "note": r.note}))
"""


def test_an_import_proves_each_binary_so_the_first_hit_starts_no_child(warmed, tmp_path, pocl):
    """Each binary for a device here is loaded in a child process during the import (one
    proof per entry, counted in a process of its own), stored as proven, and the first HIT in
    a new process proves nothing: its line says nothing was checked and names no bundle."""
    path = tmp_path / "b.db"
    clmagic.export_bundle(path, store=warmed.store)
    fresh = str(tmp_path / "fresh")
    got = last_json(run_child(IMPORT_CHILD, BUNDLE=str(path), CLMAGIC_CACHE_DIR=fresh))
    assert (got["imported"], got["proven"], got["failed"]) == (3, 3, 0), got
    assert got["proofs"] == sorted(e.fingerprint for e in warmed.store.entries())
    assert got["steps"] == [[1, 3], [2, 3], [3, 3]]
    assert got["text"].startswith("imported 3 (3 proven loadable here), skipped 0")
    assert all(e.meta.untrusted == "" for e in DirectoryStore(fresh).entries())
    out = last_json(run_child(HIT_CHILD, SRC=SAXPY, DEV=pocl, CLMAGIC_CACHE_DIR=fresh))
    assert out["outcome"] == "HIT" and out["proofs"] == [] and out["once"] == "", out
    assert "bundle" not in out["note"]


def test_a_bundle_with_truncated_binaries_is_refused_at_import_one_line_each(warmed, tmp_path,
                                                                            pocl):
    """Two of three binaries cut short (their checksums recomputed, as a forger would): the
    import proves each in a child, imports the good one and says, one line each, which did
    not load and why; nothing bad reaches the cache, and no first use has to find it."""
    from stores import forged

    evil = DirectoryStore(tmp_path / "evil")
    keep = []
    for listed in warmed.store.entries():  # POCL's two cut short, Oclgrind's kept whole
        e = warmed.store.get(listed.fingerprint, listed.key)
        if listed.fingerprint == clmagic.resolve_device(pocl)[0].fingerprint:
            evil.put(forged(e, e.binary[:1000]))
        else:
            keep.append(e.key)
            evil.put(e)
    assert len(keep) == 1
    clmagic.export_bundle(tmp_path / "evil.db", store=evil)
    local = DirectoryStore(tmp_path / "local")
    report = clmagic.import_bundle(tmp_path / "evil.db", store=local)
    assert (report.imported, report.failed) == (1, 2)
    assert [e.key for e in local.entries()] == keep
    text = text_of(report)
    for why in report.reasons:
        assert "not imported" in why and "in a child process" in why
        assert why in text and len(why.splitlines()) == 1
    assert sorted(w[:12] for w in report.reasons) == sorted(
        e.key[:12] for e in evil.entries() if e.key not in keep)


def test_the_import_bar_is_drawn_only_for_many_entries(capsys):
    from clmagic.show.progress import counted_bar

    with counted_bar("proving imported binaries", "entry", least=10) as step:
        for done in range(1, 4):
            step(done, 3)
    assert "proving" not in capsys.readouterr().err  # three entries: no bar to read
    with counted_bar("proving imported binaries", "entry", least=10) as step:
        for done in range(1, 13):
            step(done, 12)
    assert "proving imported binaries" in capsys.readouterr().err
