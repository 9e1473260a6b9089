"""Settings and magic lines from an unlucky or hostile user (issue 11, part A): secrets in a
Redis URL are never printed; a malformed Redis URL is one warning, then builds go on without it;
a relative cache folder does not move with ``os.chdir``; every bad magic line is one line."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import SAXPY, child_env
from IPython.utils.capture import capture_output

from clmagic import Compiler, Outcome
from clmagic.cache import manage
from clmagic.config import Settings, redact
from clmagic.show import text_of

SECRET = "s3cr3t-pw"
LEAKY_URLS = [f"redis://alice:{SECRET}@127.0.0.1:1/0", f"redis://:{SECRET}@127.0.0.1:1",
              f"redis://127.0.0.1:1/0?password={SECRET}", f"rediss://{SECRET}@127.0.0.1:1",
              f"redis://alice:{SECRET}@[::1", f"redis://u:{SECRET}/with@127.0.0.1:1"]


@pytest.mark.parametrize("url", LEAKY_URLS)
def test_redact_removes_every_password(url):
    assert SECRET not in redact(url) and "***" in redact(url)
    assert redact("/home/alice/cache") == "/home/alice/cache"


@pytest.mark.parametrize("url", LEAKY_URLS[:4])
def test_a_password_in_the_remote_url_is_never_printed(url, tmp_path, pocl, capsys):
    env = {"CLMAGIC_CACHE_DIR": str(tmp_path / "c"), "CLMAGIC_DEVICE": pocl,
           "CLMAGIC_REMOTE": url}
    settings = Settings.from_env(env)
    c = Compiler(settings)
    r = c.build(SAXPY)
    shown = [repr(settings), str(settings.env), str(settings.describe()), repr(c.store),
             str(manage.cache_info(c)), repr(r), r.note, str(manage.stats(c)),
             capsys.readouterr().err]
    shown += [text_of(manage.cache_info(c)), text_of(r), text_of(manage.stats(c))]  # as shown
    cli = subprocess.run([sys.executable, "-m", "clmagic", "info"], env=child_env(**env),
                         capture_output=True, text=True, timeout=120)
    shown += [cli.stdout, cli.stderr]
    assert all(SECRET not in s for s in shown), [s for s in shown if SECRET in s]
    assert "***" in str(manage.cache_info(c))


@pytest.mark.parametrize("url", [
    f"redis://u:{SECRET}@[::1", f"redis://u:{SECRET}@host:port", "redis://127.0.0.1:99999",
    "redis://127.0.0.1:1/0?foo=bar", "rediss://127.0.0.1:1?ssl_cert_reqs=bogus",
    "redis://127.0.0.1:1/0?socket_timeout=abc",
], ids=["ipv6", "port-word", "port-range", "unknown-param", "ssl-flag", "timeout"])
def test_a_malformed_redis_url_is_one_warning_then_builds_go_on(url, tmp_path, pocl, capsys):
    c = Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(tmp_path / "c"),
                                    "CLMAGIC_DEVICE": pocl, "CLMAGIC_REMOTE": url}))
    other = SAXPY + "__kernel void one(__global float *y) { y[0] = 1.0f; }\n"
    results = [c.build(SAXPY), c.build(other), c.build(SAXPY)]
    assert [r.outcome for r in results] == [Outcome.MISS, Outcome.MISS, Outcome.MEMORY]
    assert results[0].saved  # the local folder still works
    err = capsys.readouterr().err
    (line,) = err.splitlines()
    assert line.startswith("clmagic: warning: cannot use") and SECRET not in line


def test_a_relative_cache_dir_is_resolved_once(tmp_path, monkeypatch, pocl):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    settings = Settings.from_env({"CLMAGIC_CACHE_DIR": "rel/cache", "CLMAGIC_DEVICE": pocl})
    assert settings.cache == str(first / "rel" / "cache")
    c = Compiler(settings)
    monkeypatch.chdir(second)
    assert c.build(SAXPY).saved
    db = Settings.from_env({"CLMAGIC_CACHE_DIR": "c.db"}).cache
    assert db == str(second / "c.db")
    assert list(second.iterdir()) == []  # nothing landed where the process moved to
    assert len(list((first / "rel" / "cache").rglob("*.clbin"))) == 1
    assert Compiler(settings).build(SAXPY).outcome == Outcome.HIT


def test_a_bad_clcache_line_is_one_line(shell):
    for line in ['info "x', "info --bogus", "clear --older-than"]:
        with capture_output() as cap:
            res = shell.run_cell(f"%clcache {line}")
        out = (cap.stdout + cap.stderr).strip()
        assert not res.success and len(out.splitlines()) == 1, out
        assert "Traceback" not in out


def test_quoted_magic_values_mean_the_value(shell, pocl):
    with capture_output():
        res = shell.run_cell(f"%%clkernel --name \"prog\" --device '{pocl}' --quiet\n{SAXPY}")
    assert res.success and "prog" in shell.user_ns and "saxpy" in shell.user_ns
