"""Environment generations (reset, a changed CLMAGIC_* variable, a new store, use) and the
records: CLMAGIC_RECORD levels and FAILED trips."""

from __future__ import annotations

import re

import pytest
from conftest import SAXPY
from IPython.utils.capture import capture_output

import clmagic
from clmagic import Compiler, Outcome, Settings
from clmagic.process import session as _session
from clmagic.show import text_of
from clmagic.store import DirectoryStore

BROKEN = "__kernel void broken(__global int *a) { a[0] = undefined_name; }\n"


@pytest.fixture
def process_env(monkeypatch, tmp_path, pocl):
    """The process-wide compiler on a fresh environment (restored after the test)."""
    monkeypatch.setenv("CLMAGIC_CACHE_DIR", str(tmp_path / "first"))
    monkeypatch.setenv("CLMAGIC_DEVICE", pocl)
    for name in ("CLMAGIC_REMOTE", "CLMAGIC_RECORD", "CLMAGIC_CACHE_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_session, "_compiler", None)
    return tmp_path


@pytest.fixture
def magic_shell(ipshell, process_env):
    """The shell with clmagic's magics on the process-wide compiler (as %load_ext does)."""
    from clmagic.ipython.magics import CLMagics

    ipshell.reset(new_session=False)
    ipshell.register_magics(CLMagics(shell=ipshell))
    yield ipshell
    ipshell.reset(new_session=False)


def _cell(shell, cell: str = SAXPY) -> str:
    with capture_output() as cap:
        res = shell.run_cell(f"%%clkernel\n{cell}")
    assert res.success, res.error_in_exec
    return cap.outputs[0].data["text/plain"]


def test_reset_reaches_a_loaded_magic(magic_shell, process_env):
    assert _cell(magic_shell).startswith("MISS")
    assert _cell(magic_shell).startswith("MEMORY")
    new = clmagic.reset(Settings.from_env({"CLMAGIC_CACHE_DIR": str(process_env / "second"),
                                           "CLMAGIC_DEVICE": clmagic.get_compiler().device_spec
                                           or ""}))
    assert clmagic.get_compiler() is new
    assert _cell(magic_shell).startswith("MISS")  # not MEMORY: nothing of the old generation
    new.flush()  # the save runs in the background
    assert (process_env / "second").is_dir()
    assert len(new.history.records) == 1  # reset starts over


@pytest.mark.parametrize("how", ["os.environ", "%env"])
def test_a_changed_cache_variable_is_a_new_generation(magic_shell, process_env, how):
    assert _cell(magic_shell).startswith("MISS")
    old = clmagic.get_compiler()
    second = process_env / "second"
    if how == "%env":
        magic_shell.run_line_magic("env", f"CLMAGIC_CACHE_DIR={second}")
    else:
        import os

        os.environ["CLMAGIC_CACHE_DIR"] = str(second)
    line = _cell(magic_shell)
    assert line.startswith("MISS") and "sav" in line  # the new store, not the old memory
    now = clmagic.get_compiler()
    assert now is not old and now.store.location == str(second)
    assert len(list(now.store.entries())) == 1
    assert [r.outcome for r in now.history.records] == ["MISS", "MISS"]  # the session goes on
    assert clmagic.get_compiler() is now  # unchanged variables: the same compiler


def test_a_new_store_on_the_compiler_serves_nothing_from_memory(compiler, tmp_path):
    assert compiler.build(SAXPY).outcome == Outcome.MISS
    assert compiler.build(SAXPY).outcome == Outcome.MEMORY
    compiler.store = DirectoryStore(tmp_path / "other")
    r = compiler.build(SAXPY)
    assert r.outcome == Outcome.MISS and r.saved
    assert [e.key for e in compiler.store.entries()] == [r.key]
    compiler.store = None
    assert compiler.build(SAXPY).outcome == Outcome.MISS


def test_use_switches_store_and_says_which(process_env):
    first = clmagic.build(SAXPY)
    assert first.outcome == Outcome.MISS
    target = process_env / "shared.db"
    using = clmagic.use(target)
    assert str(using) == f"clmagic: now using the sqlite cache at {target}"
    c = clmagic.get_compiler()
    assert c.store.location == str(target) and c.settings.cache == str(target)
    r = clmagic.build(SAXPY)
    assert r.outcome == Outcome.MISS and r.saved
    assert clmagic.cache_info().location.startswith(str(target))
    assert str(clmagic.use("off")) == "clmagic: now caching in memory only (no store)"
    assert clmagic.build(SAXPY).outcome == Outcome.MISS
    assert clmagic.get_compiler() is c  # an explicit choice stays until a variable changes
    back = clmagic.use(process_env / "first")
    assert back.kind == "directory" and clmagic.build(SAXPY).outcome == Outcome.HIT


def test_clcache_use_in_the_notebook(magic_shell, process_env):
    _cell(magic_shell)
    target = process_env / "course"
    using = magic_shell.run_line_magic("clcache", f"use {target}")
    assert str(using) == f"clmagic: now using the directory cache at {target}"
    assert _cell(magic_shell).startswith("MISS")
    clmagic.get_compiler().flush()  # the save runs in the background
    assert (target / clmagic.get_compiler().resolve()[0].fingerprint).is_dir()
    with capture_output() as cap:
        res = magic_shell.run_cell("%clcache use")
    assert "usage: %clcache use PATH" in cap.stdout + cap.stderr + str(res.error_in_exec)


# -- records ---------------------------------------------------------------------------------

@pytest.mark.parametrize("value,level", [("off", "off"), ("0", "off"), ("none", "off"),
                                         ("summary", "summary"), ("", "summary"),
                                         ("default", "summary"), ("FULL", "full")])
def test_record_levels_are_read(value, level):
    assert Settings.from_env({"CLMAGIC_RECORD": value}).record == level


def test_an_unknown_record_level_is_summary_with_one_warning(capsys):
    assert Settings.from_env({"CLMAGIC_RECORD": "everything"}).record == "summary"
    assert "CLMAGIC_RECORD='everything' is not off, summary or full" in capsys.readouterr().err


def _compiler(cache_dir, pocl, **env: str) -> Compiler:
    return Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(cache_dir),
                                       "CLMAGIC_DEVICE": pocl, **env}))


def test_record_off_keeps_nothing_and_builds_as_usual(cache_dir, pocl, capsys):
    c = _compiler(cache_dir, pocl, CLMAGIC_RECORD="off")
    assert [c.build(SAXPY).outcome for _ in range(2)] == ["MISS", "MEMORY"]
    assert _compiler(cache_dir, pocl, CLMAGIC_RECORD="off").build(SAXPY).outcome == "HIT"
    with pytest.raises(clmagic.BuildError):
        c.build(BROKEN)
    assert c.history.records == [] and not c.history.tally
    s = clmagic.stats(c)
    assert (s.hits, s.misses, s.memory, s.failed, s.hit_rate) == (0, 0, 0, 0, None)
    assert s.entries == 1  # the store still holds what was built
    assert clmagic.history_frame(compiler=c).empty
    assert capsys.readouterr().err == ""


def test_record_off_with_debug_still_traces(cache_dir, pocl, capsys):
    c = _compiler(cache_dir, pocl, CLMAGIC_RECORD="off", CLMAGIC_CACHE_DEBUG="1")
    c.build(SAXPY)
    assert "clmagic: MISS" in capsys.readouterr().err
    assert c.history.records == []


def test_record_summary_and_full(cache_dir, pocl):
    summary = _compiler(cache_dir, pocl)
    summary.build(SAXPY)
    full = _compiler(cache_dir, pocl, CLMAGIC_RECORD="full")
    full.build(SAXPY)
    assert summary.history.records[0].source is None
    assert full.history.records[0].source == SAXPY
    assert clmagic.cache_info(full).record == "full"


def test_a_refused_build_is_recorded_as_failed_with_its_first_error(compiler, capsys):
    compiler.history.debug = True
    with pytest.raises(clmagic.BuildError) as info:
        compiler.build(BROKEN)
    (rec,) = compiler.history.records
    assert rec.outcome == Outcome.FAILED and rec.kernels == ["broken"] and not rec.saved_to_store
    assert "undefined_name" in rec.note and "error" in rec.note.lower()
    assert rec.note == info.value.first_error and "\n" not in rec.note
    assert rec.build_log == info.value.log
    err = capsys.readouterr().err
    assert "clmagic: FAILED" in err and "failed 1" in err
    s = clmagic.stats(compiler)
    assert s.failed == 1 and s.hit_rate is None  # a refusal is no cached trip
    assert re.search(r"^failed +1 ", text_of(s), re.M)  # the session column
    df = clmagic.history_frame(compiler=compiler)
    assert list(df["outcome"]) == ["FAILED"]
    assert list(compiler.store.entries()) == []  # nothing stored
    with pytest.raises(clmagic.BuildError):
        compiler.build(BROKEN, use_cache=False)  # a bypassed build that fails is FAILED too
    assert [r.outcome for r in compiler.history.records] == ["FAILED", "FAILED"]


def test_every_outcome_word_is_the_same_everywhere():
    from clmagic.show.line import COLOURS

    assert [o.value for o in Outcome] == ["MISS", "HIT", "MEMORY", "REKEYED", "CORRUPT", "BYPASS",
                                         "FAILED"]
    assert set(COLOURS) == set(Outcome)
