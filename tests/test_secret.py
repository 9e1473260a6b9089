"""The team secret (issue 22, class 7): ``CLMAGIC_CACHE_SECRET`` is read as bytes once, checked
in one line, held by a :class:`~clmagic._secret.Secret` that no repr, traceback (``%xmode
Verbose`` included), log, DataFrame or pickle shows; a blank one is refused with a warning. Real
processes with real environments (bytes that are not UTF-8 included), real builds on POCL."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest
from conftest import ROOT

from clmagic import Compiler
from clmagic._secret import SECRET_VAR, Secret, read_secret
from clmagic.config import Settings

NOT_UTF8 = b"zq7 \xff\xfe wombat \xc3("  # invalid UTF-8 (a lone continuation, a cut sequence)
SHOWN_FORMS = [b"zq7", b"wombat", b"\xff\xfe", NOT_UTF8.decode("latin-1").encode(),
               NOT_UTF8.decode("utf-8", "surrogateescape").encode("utf-8", "backslashreplace"),
               repr(NOT_UTF8).encode(), b"\\xff"]
SRC = "__kernel void k(__global int *a) { a[0] = 11; }"


def _env(**extra: bytes | str) -> dict[bytes, bytes]:
    """This process's environment as bytes, with ``extra`` (values as given: any bytes)."""
    env = {k: v for k, v in os.environb.items() if k != SECRET_VAR.encode()}
    env[b"PYTHONPATH"] = str(ROOT).encode()
    for k, v in extra.items():
        env[k.encode()] = v if isinstance(v, bytes) else v.encode()
    return env


def _child(code: str, **env: bytes | str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-c", code], env=_env(**env), capture_output=True,
                          timeout=240)


def _leaks(out: bytes, secret: bytes) -> list[bytes]:
    forms = {secret, secret.strip(), *(f for f in SHOWN_FORMS if secret == NOT_UTF8)}
    return [f for f in forms if f and f in out]


BUILD = ("import json, clmagic\n"
         f"r = clmagic.build({SRC!r})\n"
         "print(json.dumps({'outcome': str(r.outcome)}))\n")


def _outcome(proc: subprocess.CompletedProcess[bytes]) -> str:
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return str(json.loads(proc.stdout.decode().strip().splitlines()[-1])["outcome"])


# -- the type ----------------------------------------------------------------------------------

def test_a_secret_shows_only_stars_and_is_not_pickled():
    s = Secret(b"hunter2")
    shown = [repr(s), str(s), f"{s}", f"{s!r}", "%s" % s,  # noqa: UP031 (one of the ways shown)
             format(s, ">20"), json.dumps({"s": s}, default=str), repr([s]), repr({"k": s})]
    assert all("hunter2" not in x for x in shown) and "Secret(***)" in shown[0]
    with pytest.raises(TypeError, match="not pickled"):
        pickle.dumps(s)
    with pytest.raises(TypeError):
        pickle.dumps(Settings.from_env({SECRET_VAR: "hunter2", "CLMAGIC_CACHE_DIR": "0"}))
    assert s == Secret(b"hunter2") and s != Secret(b"hunter3")
    assert hash(s) == hash(Secret(b"hunter2"))
    assert not hasattr(s, "__dict__") and "hunter2" not in str(dir(s))


@pytest.mark.parametrize("value", ["", " ", "\t\n ", "\u00a0\u2003"])
def test_a_blank_secret_is_refused_with_one_warning(value, capsys):
    settings = Settings.from_env({SECRET_VAR: value, "CLMAGIC_CACHE_DIR": "0"})
    assert settings.secret is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{SECRET_VAR} is set but blank; refused" in err
    row = next(r for r in settings.describe() if r[0] == "secret")
    assert row[2] == "" and "blank: refused" in row[3]
    assert Settings.from_env({"CLMAGIC_CACHE_DIR": "0"}).secret is None  # unset: nothing said
    assert capsys.readouterr().err == ""


def test_blanks_around_a_secret_are_not_part_of_it():
    """As before the secret was bytes: signatures made with `` s `` and ``s`` agree."""
    assert read_secret({SECRET_VAR: "  team secret 42\n"})[0] == Secret(b"team secret 42")
    assert read_secret({SECRET_VAR: "\u00e9t\u00e9"})[0] == Secret("\u00e9t\u00e9".encode())


# -- real processes ------------------------------------------------------------------------------

def test_a_secret_that_is_not_utf8_builds_signs_and_is_one_line(tmp_path, pocl):
    db = str(tmp_path / "team.db")  # a SQLite cache: with a secret, entries must be signed
    first = _child(BUILD, CLMAGIC_CACHE_DIR=db, CLMAGIC_DEVICE=pocl, CLMAGIC_CACHE_SECRET=NOT_UTF8)
    assert _outcome(first) == "MISS"
    lines = [ln for ln in first.stderr.decode(errors="replace").splitlines() if ln.strip()]
    assert len(lines) == 1 and "not valid UTF-8" in lines[0], lines
    assert b"Traceback" not in first.stderr and not _leaks(first.stdout + first.stderr, NOT_UTF8)
    again = _child(BUILD, CLMAGIC_CACHE_DIR=db, CLMAGIC_DEVICE=pocl,
                   CLMAGIC_CACHE_SECRET=NOT_UTF8)
    assert _outcome(again) == "HIT"  # signed with those bytes, checked with those bytes
    other = _child(BUILD, CLMAGIC_CACHE_DIR=db, CLMAGIC_DEVICE=pocl,
                   CLMAGIC_CACHE_SECRET=NOT_UTF8 + b"x")
    assert _outcome(other) != "HIT"  # another secret's entry is refused


VERBOSE = """
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("xmode", "Verbose")
ip.run_line_magic("load_ext", "clmagic")
ip.run_cell("import clmagic\\nclmagic.build('__kernel void k(__global int *a) { a[0] = nope; }')")
ip.run_cell("%%clkernel\\n__kernel void k(__global int *a) { a[0] = nope; }")
ip.run_cell("from clmagic.config import Settings\\ns = Settings.from_env()\\n"
            "print(repr(s), s.describe(), s.env)\\n1/0")
ip.run_cell("%clcache info")
ip.run_cell("%clcache stats")
"""


@pytest.mark.parametrize("secret", [NOT_UTF8, b"hunter2-team", b"  padded kumquat  "])
def test_no_traceback_repr_or_table_shows_the_secret(tmp_path, pocl, secret):
    proc = _child(VERBOSE, CLMAGIC_CACHE_DIR=str(tmp_path / "c"), CLMAGIC_DEVICE=pocl,
                  CLMAGIC_CACHE_SECRET=secret)
    out = proc.stdout + proc.stderr
    assert b"ZeroDivisionError" in out and b"nope" in out  # the tracebacks were shown, verbose
    assert not _leaks(out, secret), out.decode(errors="replace")[-3000:]
    for args in (["config"], ["config", "--json"], ["info"], ["stats", "--json"], ["ls"]):
        cli = subprocess.run([sys.executable, "-m", "clmagic", *args], timeout=240,
                             capture_output=True, env=_env(CLMAGIC_CACHE_DIR=str(tmp_path / "c"),
                                                           CLMAGIC_CACHE_SECRET=secret))
        assert cli.returncode == 0, cli.stderr
        assert not _leaks(cli.stdout + cli.stderr, secret), (args, cli.stdout)


def test_warm_hands_the_secret_to_its_workers_only(tmp_path, pocl):
    (tmp_path / "k.cl").write_text(SRC)
    db = str(tmp_path / "team.db")
    warm = subprocess.run([sys.executable, "-m", "clmagic", "warm", str(tmp_path / "k.cl"),
                           "--device", pocl, "--jobs", "1"], capture_output=True, timeout=240,
                          env=_env(CLMAGIC_CACHE_DIR=db, CLMAGIC_CACHE_SECRET=NOT_UTF8))
    assert warm.returncode == 0, warm.stderr
    assert not _leaks(warm.stdout + warm.stderr, NOT_UTF8)
    hit = _child(BUILD, CLMAGIC_CACHE_DIR=db, CLMAGIC_DEVICE=pocl, CLMAGIC_CACHE_SECRET=NOT_UTF8)
    assert _outcome(hit) == "HIT"  # the worker signed with the same bytes


def test_the_settings_in_this_process_hold_no_secret_text(tmp_path, pocl):
    c = Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(tmp_path / "c.db"),
                                    "CLMAGIC_DEVICE": pocl, SECRET_VAR: "hunter2-team"}))
    r = c.build(SRC)
    c.flush()
    everything = [repr(c.settings), str(c.settings.env), str(c.settings.describe()),
                  str(vars(c.store)), repr(r), str(c.settings.origins)]
    assert all("hunter2" not in x for x in everything), everything
    assert c.store.secret == Secret(b"hunter2-team")
