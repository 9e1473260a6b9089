"""Nothing in the user's home without being asked: the default cache folder is made when the
first entry is saved there, not when the cache is opened, checked, listed or cleared. The whole
test run keeps $HOME empty (conftest points it at a temporary folder and fails any test that
leaves something there); the last test shows that this guard does fail."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SAXPY, child_env

LOOK = """
import json, clmagic
from clmagic.show import text_of  # the reports' words, as a cell or the command line shows them
c = clmagic.get_compiler()
print(json.dumps([c.store.location, text_of(clmagic.cache_info()).splitlines()[0],
                  len(clmagic.cache_frame()), text_of(clmagic.clear_cache()),
                  clmagic.stats().hits]))
"""

BUILD = f"""
import json, clmagic
print(json.dumps(clmagic.build({SAXPY!r}).outcome))
"""


def _home_env(home: Path, pocl: str) -> dict[str, str]:
    env = child_env(HOME=str(home), CLMAGIC_DEVICE=pocl)
    for var in ("CLMAGIC_CACHE_DIR", "XDG_CACHE_HOME"):  # the default: under HOME
        env.pop(var, None)
    return env


def _py(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=240)


def test_the_default_cache_folder_is_made_by_the_first_save_only(tmp_path, pocl):
    home = tmp_path / "home"
    home.mkdir()
    env = _home_env(home, pocl)
    looked = _py(LOOK, env)
    assert looked.returncode == 0, looked.stderr
    location, first_line, rows, cleared, _hits = json.loads(looked.stdout.splitlines()[-1])
    default = home / ".cache" / "clmagic" / "programs"
    assert location == str(default) and str(default) in first_line and rows == 0
    assert cleared.startswith("removed 0 entries")
    info = subprocess.run([sys.executable, "-m", "clmagic", "info"], env=env,
                          capture_output=True, text=True, timeout=240)
    assert info.returncode == 0 and str(default) in info.stdout
    assert list(home.iterdir()) == []  # opened, checked, listed, cleared: nothing made
    assert "warning" not in looked.stderr + info.stderr

    built = _py(BUILD, env)
    assert built.returncode == 0 and json.loads(built.stdout.splitlines()[-1]) == "MISS"
    entries = list(default.glob("*/*.clbin"))
    assert len(entries) == 1
    assert stat.S_IMODE(default.stat().st_mode) == 0o700  # private, as an opened one would be
    assert stat.S_IMODE(entries[0].parent.stat().st_mode) == 0o700
    again = _py(BUILD, env)
    assert json.loads(again.stdout.splitlines()[-1]) == "HIT"


def test_a_default_folder_that_cannot_be_made_is_memory_only_with_one_warning(tmp_path, pocl):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".cache").mkdir()
    (home / ".cache" / "clmagic").write_text("a file where the cache folder's parent should be")
    built = _py(BUILD, _home_env(home, pocl))
    assert built.returncode == 0 and json.loads(built.stdout.splitlines()[-1]) == "MISS"
    assert built.stderr.count("cannot be used") == 1 and "memory only" in built.stderr


@pytest.mark.skipif(os.environ.get("CLMAGIC_TEST_HOME_GUARD") != "1",
                    reason="run only by the test below, to see the $HOME guard fail")
def test_writes_into_home():
    (Path.home() / ".cache" / "clmagic").mkdir(parents=True)


def test_the_home_guard_fails_a_test_that_leaves_something_in_home():
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
         f"{Path(__file__).name}::test_writes_into_home"],
        env={**os.environ, "CLMAGIC_TEST_HOME_GUARD": "1"}, cwd=ROOT / "tests",
        capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "1 passed, 1 error" in proc.stdout
    assert "the test left 2 path(s) in $HOME: .cache, .cache/clmagic" in proc.stdout
