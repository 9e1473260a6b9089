"""The fault matrix: every kind of damage is detected, counted as CORRUPT, rebuilt and rewritten;
environment faults (read-only, full disk) degrade to compiling. Run for every store backend.

``FAULTS`` is the table in docs/reliability.md (``test_reliability_doc_is_the_fault_table``
checks it; ``CLMAGIC_WRITE_DOCS=1`` rewrites it).
"""

from __future__ import annotations

import inspect
import json
import os
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT, child_env
from stores import can_drop_dac, drop_dac

from clmagic import Compiler, Outcome
from clmagic.config import Settings
from clmagic.entry import FORMAT_VERSION, Entry
from clmagic.entry_file import HEADER, decode

SRC = """\
__kernel void fill(__global int *a)
{
    const int i = get_global_id(0);
    a[i] = 3 * i + 1;
}
"""



def check(r) -> bool:
    """Run the ``fill`` kernel of a build result: does it compute what SRC says?"""
    import numpy as np
    import pyopencl as cl

    a = np.zeros(16, np.int32)
    buf = cl.Buffer(r.context, cl.mem_flags.WRITE_ONLY, a.nbytes)
    r.kernels["fill"](r.queue, a.shape, None, buf)
    cl.enqueue_copy(r.queue, a, buf)
    return bool((a == 3 * np.arange(16) + 1).all())


CHILD = inspect.getsource(check) + """
import json, os, clmagic
c = clmagic.Compiler()
out = []
for src in json.loads(os.environ["SOURCES"]):
    r = c.build(src)
    out.append({"outcome": r.outcome, "saved": r.saved, "note": r.note,
                "correct": check(r) if "fill" in r.kernels else None})
print(json.dumps({"builds": out, "corrupt": c.history.tally["CORRUPT"],
                  "store": c.store is not None}))
"""


def _meta_len(b: bytes) -> int:
    return HEADER.unpack_from(b)[2]


def _flip(b: bytes, i: int) -> bytes:
    return b[:i] + bytes([b[i] ^ 0xFF]) + b[i + 1:]


def _huge(b: bytes) -> bytes:
    """The metadata's ``created`` made a 401-digit integer, its CRC right (the parse decides)."""
    magic, version, meta_len, _crc, _reserved, bin_len = HEADER.unpack_from(b)
    meta = json.loads(b[HEADER.size:HEADER.size + meta_len])
    raw = json.dumps({**meta, "created": 10 ** 400}).encode()
    return (HEADER.pack(magic, version, len(raw), zlib.crc32(raw), 0, bin_len) + raw
            + b[HEADER.size + meta_len:])


@dataclass(frozen=True)
class Fault:
    id: str
    fault: str
    outcome: str
    result: str
    test: str
    damage: Callable[[bytes], bytes] | None = None  # byte-level damage, every backend
    plant: bool = False  # backend-specific damage (StoreFactory.plant)
    child: bool = False  # the rebuild runs in a child that obeys file permissions


P, S = "test_planted.py::", "test_shared.py::"
W, SI = "test_wrong_program.py::", "test_settings_input.py::"
REPAIRED = "rebuilt, entry rewritten, one warning, counted CORRUPT"
ENTRY = "test_damaged_entry_is_detected_counted_and_repaired"
FAULTS = [
    Fault("truncated", "truncated file", Outcome.CORRUPT, REPAIRED, ENTRY,
          damage=lambda b: b[: len(b) * 2 // 3]),
    Fault("zero-length", "zero-length file", Outcome.CORRUPT, REPAIRED, ENTRY,
          damage=lambda b: b""),
    Fault("flipped-binary", "a flipped byte in the binary", Outcome.CORRUPT, REPAIRED, ENTRY,
          damage=lambda b: _flip(b, HEADER.size + _meta_len(b) + 100)),
    Fault("flipped-meta", "a flipped byte in the metadata", Outcome.CORRUPT, REPAIRED, ENTRY,
          damage=lambda b: _flip(b, HEADER.size + _meta_len(b) // 2)),
    Fault("bad-magic", "bad magic bytes", Outcome.CORRUPT, REPAIRED, ENTRY,
          damage=lambda b: b"NOTCLMAG" + b[8:]),
    Fault("newer-version", "a newer format version", Outcome.CORRUPT, REPAIRED, ENTRY,
          damage=lambda b: b[:8] + struct.pack("<I", FORMAT_VERSION + 1) + b[12:]),
    Fault("huge-number", "a 401-digit integer as `created` in the metadata, its CRC right (any "
          "malformed stored value: the validators' contract, fuzzed in `test_fuzz_*.py`)",
          Outcome.CORRUPT, REPAIRED + "; never an OverflowError; `clmagic ls` says it is "
          "damaged in one line", ENTRY, damage=_huge),
    Fault("directory", "a directory where the file should be", Outcome.CORRUPT,
          REPAIRED + "; the directory is removed", ENTRY, plant=True),
    Fault("leftover-temp", "a temp file left by a writer killed mid-write (no entry)",
          Outcome.CORRUPT, REPAIRED + "; the stale temp file is removed", ENTRY, plant=True),
    Fault("symlink", "a symlink planted at the entry's path", Outcome.CORRUPT,
          REPAIRED + "; not followed (its target is untouched)", ENTRY, plant=True),
    Fault("unreadable", "an unreadable file (permissions)", Outcome.CORRUPT, REPAIRED, ENTRY,
          plant=True, child=True),
    Fault("driver-refuses", "a binary the driver refuses (another driver's, checksums valid)",
          Outcome.CORRUPT, REPAIRED, "test_a_binary_the_driver_refuses_is_corrupt"),
    Fault("read-only", "a read-only cache directory", "HIT / REKEYED / MISS",
          "stored entries are served (HIT, or REKEYED for a comment-only edit); new builds MISS"
          " and are not saved; one warning",
          "test_read_only_cache_serves_hits_stores_nothing_says_so_once"),
    Fault("stale-code-index", "a code index naming a damaged or removed entry", Outcome.MISS,
          "the index is advisory: the entry it names must pass every check and carry that code"
          " key, else the source is built",
          "test_rekey.py::test_a_damaged_original_or_a_stale_index_is_a_build"),
    Fault("full-disk", "a full disk (RLIMIT_FSIZE)", Outcome.MISS,
          "built, not saved, no partial or temp file left, one warning",
          "test_full_disk_builds_saves_nothing_leaves_nothing"),
    Fault("hostile-dir", "a world-writable cache directory, or one owned by another user",
          "MISS / MEMORY", "refused: memory only, one warning naming CLMAGIC_CACHE_TRUST=1",
          "test_hostile.py::test_hostile_cache_folder_is_refused"),
    # planted things and unlucky states (issue 11, part B)
    Fault("not-a-file-entry", "a FIFO, socket, device, folder or symlink to a FIFO where an entry "
          "should be", Outcome.CORRUPT, REPAIRED + "; never opened (`O_NONBLOCK`, then `fstat`), "
          "the warning says what it is; listings skip it",
          P + "test_an_entry_that_is_not_a_file_is_named_and_rebuilt"),
    Fault("not-a-file-hits", "a FIFO, socket, device or folder as a hit counter", Outcome.HIT,
          "served; hits not counted, the warning says what it is",
          P + "test_a_hit_counter_that_is_not_a_file_never_blocks_a_hit"),
    Fault("not-a-file-sqlite", "a FIFO, folder or device as the SQLite file or its -wal, -shm, "
          "-journal", "MISS / MEMORY", "refused: memory only, one warning saying what it is",
          P + "test_a_sqlite_file_that_is_not_a_file_is_refused"),
    Fault("not-a-file-bundle", "a FIFO, folder, device or symlink to a FIFO as a bundle", "—",
          "one error saying what it is",
          P + "test_a_bundle_that_is_not_a_file_is_one_error"),
    Fault("bad-times", "a time out of range (hit counter in 2300, last use or `created` 1e300, "
          "negative, NaN) on every backend and in a bundle", "HIT", "shown as unknown (NaT; last "
          "use falls back to the build time): `cache_frame()`, the widget, `clear --older-than` "
          "never raise",
          P + "test_times_out_of_range_show_as_unknown"),
    Fault("leftover-temps", "temp files of writers killed long ago, beside entries", "—",
          "removed by listings (writer gone, or over an hour old) and by every clear",
          P + "test_leftover_temp_files_go_with_listings_and_clears"),
    Fault("open-device-folder", "a device folder others can write into (0777, 0775) under a "
          "private root", "HIT", "made 0700 again",
          P + "test_a_device_folder_others_can_write_is_repaired"),
    Fault("foreign-device-folder", "a device folder owned by another user", Outcome.MISS,
          "not used, one warning; builds compile",
          P + "test_a_device_folder_of_another_user_is_not_used"),
    Fault("folder-deleted", "the cache folder deleted mid-session", Outcome.MISS,
          "recreated 0700 (its missing parents too), whatever the umask",
          P + "test_a_cache_folder_deleted_mid_session_comes_back_private"),
    Fault("sqlite-lock-held", "a SQLite write lock held by another process for many saves",
          Outcome.MISS, "not saved meanwhile, one warning; saving pauses for a minute, then "
          "resumes",
          "test_store_writes.py::"
          "test_sqlite_lock_held_on_every_save_pauses_saving_then_saves_again"),
    Fault("clear-team-layer", "`clear_cache()` (any filter), `%clcache clear`, the widget on a "
          "layered store", "—", "only this machine's layer is cleared; the team's store only "
          "with `remote=True` / `--remote` (a Redis cache alone: refused without it)",
          "test_shared.py::test_clearing_a_layered_cache_leaves_the_teams_layer_unless_asked"),
    Fault("moved-entry", "an entry moved to another key or rewritten with its checksum (a SQLite "
          "row's key changed, a Redis binary and checksum replaced, an entry file relabelled, a "
          "bundle row doctored)", Outcome.CORRUPT, REPAIRED + "; the digest over what it was "
          "built for does not match", S + "test_a_sqlite_row_moved_to_another_key_is_refused"),
    Fault("forged-entry", "a full forgery (digest recomputed) in a shared store, or one signed "
          "with another secret, with `CLMAGIC_CACHE_SECRET` set", Outcome.CORRUPT,
          REPAIRED + "; refused as unsigned / badly signed and counted (`Store.refused`)",
          S + "test_with_a_team_secret_a_full_forgery_in_a_shared_store_is_refused"),
    Fault("crashing-binary", "a truncated POCL binary with recomputed checksums, from a bundle or "
          "the team's store", Outcome.CORRUPT, REPAIRED + "; loaded first in a child, which "
          "crashes (SIGSEGV/SIGABRT) instead of the user's process",
          S + "test_a_bundle_with_a_truncated_binary_never_crashes_the_users_process"),
    # never the wrong program (issue 11): what the key covers, what the driver receives
    Fault("include-forms", "an include spelled past a one-line `#include` (line splice, "
          "digraph, trigraph, `#import`, `#include_next`, `__has_include`, a header's own "
          "includes, a symlink with `..`, `-include`, `-imacros`, `-isystem`, `-iquote`, "
          "`-idirafter`)", "MISS", "the key covers every file the compiler can read: after an "
          "edit a new Compiler misses and computes the new value",
          W + "test_every_include_is_keyed_or_bypasses"),
    Fault("cannot-tell", "an include clmagic cannot follow (`#include MACRO`, `-iprefix`, `-I=`, "
          "`@file`, `-Xclang`, `-mllvm`, an unknown option, a header that is not a regular "
          "file)", Outcome.BYPASS, "built without the cache, one line `not cached: … cannot "
          "tell …`", W + "test_options_that_may_read_unknown_files_cannot_be_keyed"),
    Fault("driver-env-flags", "build flags a driver reads from the environment "
          "(`POCL_EXTRA_BUILD_FLAGS`)", "MISS / BYPASS", "in the key; changed within a session: "
          "bypassed (POCL keeps the first value it read)",
          W + "test_driver_flags_from_the_environment_are_keyed"),
    Fault("driver-read-first", "`POCL_EXTRA_BUILD_FLAGS` read by POCL before clmagic looked "
          "(a plain pyopencl build, clmagic's probe), then changed, unset or set", "BYPASS",
          "the driver's build, not saved; one line `not cached: POCL_EXTRA_BUILD_FLAGS changed "
          "after the driver read it …`; a new process computes the new value",
          "test_driver_env.py::test_the_issues_example"),
    Fault("pocl-cache-off-loads", "`POCL_KERNEL_CACHE=0` and one stored binary loaded by "
          "several processes (eviction rewriting entries, the readout helper's binary)", "HIT",
          "each load gets a POCL build folder of its own: no release removes another's "
          "(POCL aborted \"Final linking of kernel k failed\")",
          "test_evict_crash.py::test_readers_of_one_entry_with_pocls_cache_off_do_not_abort"),
    Fault("removed-cwd", "the working folder removed (`os.rmdir` of the current folder)",
          "MISS / HIT", "builds, keyed as a folder with no files; a header from it: the "
          "driver's error", "test_removed_folder.py::test_the_magic_in_a_removed_folder"),
    Fault("mimicked-facts", "`#warning` / `#pragma message` lines in ptxas's format", "—",
          "no kernel facts from them: ptxas lines only on NVIDIA, from the line's start, never "
          "a quoted source line", "test_ptxas.py::test_warnings_that_mimic_ptxas_say_nothing"),
    Fault("header-during-build", "a header edited, or created in an earlier search folder, "
          "while the driver builds", "MISS", "not saved, in memory or in the store; the note "
          "names the header; the next build compiles the new contents",
          W + "test_a_header_edited_during_the_build_is_not_saved"),
    Fault("line-separators", "a form feed, vertical tab, `\\x1c`–`\\x1e`, NEL, U+2028/U+2029 "
          "or a lone CR in a comment; blanks after a splice", "MISS", "split at `\\n` only: the "
          "driver computes what pyopencl computes from the same text; other meanings, other "
          "keys", W + "test_normalisation_keeps_the_meaning"),
    Fault("shell-options", "build options with shell characters (`-DSCALE=(2*3)`, `<<`, `~`, "
          "`!`, `&`, `?:`, `>`, `'a'`)", "MISS", "sent unquoted, as pyopencl sends them: the "
          "value written, on POCL and Oclgrind",
          W + "test_options_with_shell_characters_reach_the_driver_as_written"),
    Fault("url-password", "a password in `CLMAGIC_REMOTE` / `CLMAGIC_CACHE_DIR`", "HIT / MISS",
          "printed nowhere (`clmagic info`, `%clcache info`, warnings, reprs): `user:***@`",
          SI + "test_a_password_in_the_remote_url_is_never_printed"),
    Fault("bad-redis-url", "a malformed Redis URL (bad host, port, database, parameter, TLS "
          "flag)", "MISS", "one warning, then every build compiles without it",
          SI + "test_a_malformed_redis_url_is_one_warning_then_builds_go_on"),
    Fault("relative-cache-dir", "a relative `CLMAGIC_CACHE_DIR`, then `os.chdir`", "HIT",
          "resolved to an absolute path once, when the settings are read and checked",
          SI + "test_a_relative_cache_dir_is_resolved_once"),
    Fault("bad-magic-line", "a malformed `%%clkernel` line (unbalanced quotes, `--opts` inside "
          "`--name \"…\"`, a name that is not an identifier, an empty `--device`)", "—",
          "one line, nothing changed", "test_magic_input.py::"
          "test_bad_input_is_one_line_and_changes_nothing"),
]


def render_table() -> str:
    """The fault matrix as a Markdown table."""
    rows = ["| fault | outcome of the next build | what happens | test |",
            "|---|---|---|---|"]
    for f in FAULTS:
        rows.append(f"| {f.fault} | {f.outcome} | {f.result} | `{f.test}` |")
    return "\n".join(rows) + "\n"


def _settings(location: str, device: str) -> Settings:
    return Settings.from_env({"CLMAGIC_CACHE_DIR": location, "CLMAGIC_DEVICE": device})


def _child(sources: list[str], env: dict[str, str], unprivileged=False, preexec=None):
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], env=child_env(SOURCES=json.dumps(sources), **env),
        capture_output=True, text=True, timeout=240,
        preexec_fn=preexec or (drop_dac if unprivileged else None),
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _warnings(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("clmagic: warning")]


ENTRY_FAULTS = [f for f in FAULTS if f.test == ENTRY]


@pytest.mark.parametrize("fault", ENTRY_FAULTS, ids=[f.id for f in ENTRY_FAULTS])
def test_damaged_entry_is_detected_counted_and_repaired(fault, store_factory, tmp_path, pocl,
                                                         capsys):
    store, location = store_factory(tmp_path)
    settings = _settings(location, pocl)
    first = Compiler(settings, store=store).build(SRC)
    fp, key = first.device.fingerprint, first.key
    assert first.outcome == Outcome.MISS and first.saved
    if fault.damage:
        store_factory.write_raw(store, fp, key, fault.damage(store_factory.raw(store, fp, key)))
    if fault.plant:
        if fault.child and not can_drop_dac():
            pytest.skip("running as root without CAP_SETPCAP: cannot deny a read to root")
        store_factory.plant(store, fp, key, fault.id)
    capsys.readouterr()

    if fault.child:
        report, err = _child([SRC], {**store_factory.env(location), "CLMAGIC_DEVICE": pocl},
                             unprivileged=True)
        (build,) = report["builds"]
        outcome, correct, corrupt = build["outcome"], build["correct"], report["corrupt"]
    else:
        c = Compiler(settings, store=store_factory.reopen(location))
        r = c.build(SRC)
        outcome, correct, corrupt = r.outcome, check(r), c.history.tally[Outcome.CORRUPT]
        assert r.saved and c.history.records[-1].outcome == Outcome.CORRUPT
        err = capsys.readouterr().err
    assert outcome == fault.outcome == Outcome.CORRUPT
    assert correct, "the rebuilt program computes the right thing"
    assert corrupt == 1
    (warning,) = _warnings(err)
    assert "damaged" in warning and key[:12] in warning

    entry = decode(store_factory.raw(store, fp, key), key=key, fingerprint=fp)
    assert entry.kernels == ["fill"]  # rewritten, valid
    again = Compiler(settings, store=store_factory.reopen(location)).build(SRC)
    assert again.outcome == Outcome.HIT and check(again)
    if fault.id == "symlink":
        assert Path(location + "-victim").read_bytes() == b"precious"
    if store_factory.name == "directory":
        folder = Path(location) / fp
        # the repaired entry and, at most, its use counter and the code index naming it: no
        # temp file, no squatter
        names = sorted(p.name for p in folder.iterdir()
                       if not (p.suffix == ".code" and p.read_bytes() == key.encode()))
        assert names in ([f"{key}.clbin"], [f"{key}.clbin", f"{key}.hits"]), names


def test_a_binary_the_driver_refuses_is_corrupt(store_factory, tmp_path, pocl, oclgrind,
                                                 capsys):
    """POCL's binary filed, with valid checksums, under Oclgrind's key: Oclgrind refuses it."""
    store, location = store_factory(tmp_path)
    foreign = Compiler(_settings(location, pocl), store=store).build(SRC)
    settings = _settings(location, oclgrind)
    mine = Compiler(settings, store=store).build(SRC)
    assert foreign.saved and mine.saved  # (waits for the background saves)
    fp, key = mine.device.fingerprint, mine.key
    meta = {k: v for k, v in store.get(fp, key).meta.to_json().items()
            if k not in ("key", "fingerprint", "binary_bytes", "binary_xxh3", "digest",
                         "signature")}
    pocl_binary = store.get(foreign.device.fingerprint, foreign.key).binary
    assert store.put(Entry.create(key, fp, pocl_binary, **meta))
    capsys.readouterr()
    c = Compiler(settings, store=store_factory.reopen(location))
    r = c.build(SRC)
    assert r.outcome == Outcome.CORRUPT and check(r) and r.saved
    (warning,) = _warnings(capsys.readouterr().err)
    assert "driver refused" in warning
    assert store.get(fp, key).binary != pocl_binary
    assert Compiler(settings, store=store_factory.reopen(location)).build(SRC).outcome == "HIT"


def test_read_only_cache_serves_hits_stores_nothing_says_so_once(tmp_path, pocl):
    if not can_drop_dac():
        pytest.skip("running as root without CAP_SETPCAP: cannot make a folder read-only")
    cache = tmp_path / "cache"
    first = Compiler(_settings(str(cache), pocl)).build(SRC)
    assert first.saved  # (waits for the background save)
    for folder in (cache / first.device.fingerprint, cache):
        folder.chmod(0o500)
    before = sorted(cache.rglob("*"))
    try:
        others = [SRC + "// same code: rekeyed\n", SRC + "#define ANOTHER_KEY 1\n"]
        report, err = _child([SRC, *others], {"CLMAGIC_CACHE_DIR": str(cache),
                                              "CLMAGIC_DEVICE": pocl}, unprivileged=True)
    finally:
        for folder in (cache, cache / first.device.fingerprint):
            folder.chmod(0o700)
    builds = report["builds"]
    assert [b["outcome"] for b in builds] == ["HIT", "REKEYED", "MISS"]
    assert all(b["correct"] and not b["saved"] for b in builds)
    assert all("not saved" in b["note"] for b in builds[1:])
    (warning,) = _warnings(err)
    assert "read-only" in warning
    assert sorted(cache.rglob("*")) == before


def test_full_disk_builds_saves_nothing_leaves_nothing(tmp_path, oclgrind):
    """RLIMIT_FSIZE of 1 KiB in the child (Oclgrind builds in memory; an entry is ~3 KiB)."""
    import resource
    import signal

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    cache = tmp_path / "cache"
    sources = [SRC, SRC + "// another key\n"]
    report, err = _child(sources, {"CLMAGIC_CACHE_DIR": str(cache), "CLMAGIC_DEVICE": oclgrind},
                         preexec=limit)
    assert [b["outcome"] for b in report["builds"]] == ["MISS", "MISS"]
    assert all(b["correct"] and not b["saved"] for b in report["builds"]), report
    assert "disk full" in report["builds"][0]["note"]
    (warning,) = _warnings(err)
    assert "full" in warning
    assert [p for p in cache.rglob("*") if p.is_file() and p.parent.name != "stats"] == []
    # with room again, the same cache works
    report, _ = _child(sources, {"CLMAGIC_CACHE_DIR": str(cache), "CLMAGIC_DEVICE": oclgrind})
    assert all(b["saved"] for b in report["builds"])


def test_reliability_doc_is_the_fault_table():
    doc = ROOT / "docs" / "reliability.md"
    table = render_table()
    if os.environ.get("CLMAGIC_WRITE_DOCS") == "1":
        text = doc.read_text()
        start = text.index("<!-- faults -->") + len("<!-- faults -->\n")
        end = text.index("<!-- /faults -->")
        doc.write_text(text[:start] + table + text[end:])
    assert table in doc.read_text(), "run CLMAGIC_WRITE_DOCS=1 pytest tests/store/test_faults.py"
    for f in FAULTS:
        name = f.test.split("::")[-1]
        base = f.test.split("::")[0] if "::" in f.test else "test_faults.py"
        path = next(p for p in (ROOT / "tests").rglob(base) if "data" not in p.parts)  # any folder
        assert f"def {name}(" in path.read_text(), f.test
