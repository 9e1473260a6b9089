"""Lifetime statistics: kept beside the cache, summed over every process, reset with --zero,
correct with 8 processes counting at once, shown beside the session's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAXPY, child_env, last_json, run_child

import clmagic
from clmagic.cache import manage
from clmagic.config import Settings
from clmagic.show import html_of, text_of
from clmagic.store.lifetime import SLOT, Counters

FP = "0123456789abcdef"

COUNTER = """
import os, sys
from clmagic.store.lifetime import Counters
c = Counters(sys.argv[1])
for i in range(int(sys.argv[2])):
    c.add("0123456789abcdef", "HIT", 1, 2.5)
    c.add("fedcba9876543210", "MISS")
"""


def test_eight_processes_counting_at_once_sum_exactly(tmp_path):
    folder = tmp_path / "stats"
    procs = [subprocess.Popen([sys.executable, "-c", COUNTER, str(folder), "300"],
                              env=child_env(), stderr=subprocess.PIPE) for _ in range(8)]
    for p in procs:
        assert p.wait(120) == 0, p.stderr.read()
    life = Counters(folder).lifetime()
    assert life[(FP, "HIT")] == [2400, 6000.0]
    assert life[("fedcba9876543210", "MISS")] == [2400, 0.0]


def test_dead_processes_files_are_folded_in_and_the_sum_kept(tmp_path):
    folder = tmp_path / "stats"
    for _ in range(3):  # each folds the files of the ones before
        subprocess.run([sys.executable, "-c", COUNTER, str(folder), "10"], env=child_env(),
                       check=True)
    assert len(list(folder.glob("*.cnt"))) == 1
    (folder / "vm-gone.0.cnt").write_bytes(b"")  # not a name this clmagic writes: left alone
    c = Counters(folder)
    c.add(FP, "HIT")  # opening our own file folds the dead one into it
    names = [p.name for p in folder.glob("*.cnt")]
    assert len(names) == 2 and "vm-gone.0.cnt" in names
    assert c.lifetime()[(FP, "HIT")][0] == 31


def test_zero_resets_lifetime_not_session_and_counting_goes_on(tmp_path):
    c = Counters(tmp_path / "stats")
    c.add(FP, "HIT", 1, 10.0)
    c.add(FP, "EVICT", 3, 3000)
    other = Counters(tmp_path / "stats")  # another handle: another process's file
    other.add(FP, "MISS")
    c.zero()
    assert c.lifetime() == {}
    assert c.session[(FP, "HIT")] == [1, 10.0]
    other.add(FP, "MISS")
    c.add(FP, "HIT")
    assert c.lifetime() == {(FP, "MISS"): [1, 0.0], (FP, "HIT"): [1, 0.0]}


def test_a_torn_or_damaged_counter_file_is_not_a_number(tmp_path):
    folder = tmp_path / "stats"
    c = Counters(folder)
    c.add(FP, "HIT", 5)
    dead = folder / "otherhost.1.abcd1234.cnt"  # another host's file: read, never folded
    dead.write_bytes(b"\x01" * SLOT.size)  # a slot whose checksum fails
    assert c.lifetime()[(FP, "HIT")][0] == 5
    (folder / "junk.txt").write_text("not counters")
    assert c.lifetime()[(FP, "HIT")][0] == 5


def test_a_folder_that_cannot_be_written_keeps_session_counts_only(tmp_path, capfd):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder should be")
    c = Counters(blocker / "stats")
    c.add(FP, "HIT")
    c.add(FP, "HIT")
    assert c.session[(FP, "HIT")][0] == 2 and c.lifetime() == {}
    assert capfd.readouterr().err.count("lifetime statistics") == 1


CHILD = """
import json, clmagic
r = clmagic.build('''{src}''')
print(json.dumps({{"outcome": r.outcome}}))
"""


@pytest.mark.parametrize("kind", ["directory", "sqlite"])
def test_lifetime_statistics_survive_the_process_and_show_beside_the_session(kind, tmp_path,
                                                                               pocl):
    where = str(tmp_path / ("cache" if kind == "directory" else "cache.db"))
    env = {"CLMAGIC_CACHE_DIR": where, "CLMAGIC_DEVICE": pocl}
    outcomes = [last_json(run_child(CHILD.format(src=SAXPY), **env))["outcome"]
                for _ in range(2)]
    assert outcomes == ["MISS", "HIT"]
    c = clmagic.Compiler(Settings.from_env(env))
    assert c.build(SAXPY).outcome == "HIT"
    s = manage.stats(c)
    assert (s.session["HIT"], s.lifetime["HIT"], s.lifetime["MISS"]) == (1, 2, 1)
    (dev,) = s.devices
    assert dev.lifetime["HIT"] == 2 and dev.lifetime.saved_ms > 0
    text = text_of(s)
    assert "session" in text and "lifetime" in text and "evictions" in text
    assert "limit 1 GiB" in text
    html = html_of(s)
    assert "<th>lifetime</th>" in html
    data = s.as_dict()
    assert data["lifetime"]["counts"]["HIT"] == 2 and data["session"]["counts"]["HIT"] == 1
    manage.zero_stats(c)
    after = manage.stats(c)
    assert after.lifetime["HIT"] == 0 and after.session["HIT"] == 1


def test_clcache_stats_zero(shell, compiler):
    compiler.build(SAXPY)
    s = shell.run_line_magic("clcache", "stats")
    assert s.lifetime["MISS"] == 1
    s = shell.run_line_magic("clcache", "stats --zero")
    assert s.lifetime["MISS"] == 0 and s.session["MISS"] == 1


def test_memory_only_keeps_no_lifetime_statistics(pocl):
    c = clmagic.Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": "0", "CLMAGIC_DEVICE": pocl}))
    c.build(SAXPY)
    s = manage.stats(c)
    assert s.lifetime is None and s.session["MISS"] == 1
    assert "-" in text_of(s).splitlines()[1]
    with pytest.raises(clmagic.OptionsError, match="memory only"):
        manage.zero_stats(c)


def test_new_outcomes_are_counted_and_shown_generically(tmp_path):
    """Statistics are generic over outcomes: one this code does not know shows under its name."""
    from clmagic.trip.records import Stats, tally_of

    c = Counters(tmp_path / "stats")
    c.add(FP, "REKEYED", 2, 5.0)
    c.add(FP, "HIT")
    s = Stats(lifetime=tally_of(c.lifetime()))
    assert "rekeyed" in text_of(s) and s.lifetime["REKEYED"] == 2
    assert json.loads(json.dumps(s.as_dict()))["lifetime"]["counts"]["REKEYED"] == 2
    assert os.path.isdir(Path(tmp_path / "stats"))


def test_counts_written_later_are_one_flush_and_never_lost(tmp_path):
    """``add(..., later=...)`` (the HIT path hands the write to the saver's thread): the session
    count is there at once, one flush is asked for however many events come before it runs, a
    reader of the lifetime (in this process) sees them all, and a process that ends normally
    has written them (the saver finishes its jobs at exit)."""
    asked: list = []
    c = Counters(tmp_path / "stats")
    for _ in range(5):
        c.add(FP, "HIT", 1, 2.0, later=asked.append)
    assert c.session[(FP, "HIT")] == [5, 10.0]
    assert len(asked) == 1 and not list((tmp_path / "stats").glob("*.cnt"))
    assert Counters(tmp_path / "stats").lifetime() == {}  # another reader: not written yet
    asked[0]()
    assert Counters(tmp_path / "stats").lifetime()[(FP, "HIT")] == [5, 10.0]
    c.add(FP, "HIT", later=asked.append)  # a new batch asks again; our own reader flushes
    assert len(asked) == 2 and c.lifetime()[(FP, "HIT")] == [6, 10.0]
    code = ("import sys\nfrom clmagic.store.lifetime import Counters\n"
            "from clmagic.trip.background import Saver\n"
            "s = Saver()\nc = Counters(sys.argv[1])\n"
            "for _ in range(50):\n    c.add('0123456789abcdef', 'HIT', later=lambda job: "
            "s.submit(None, job))\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "child")], env=child_env(),
                   check=True)
    assert Counters(tmp_path / "child").lifetime()[(FP, "HIT")][0] == 50
