"""The `clmagic` command: the quickstart's demo, devices and info."""

from __future__ import annotations

import subprocess
import sys

from conftest import child_env


def clmagic(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clmagic", *args], env=child_env(**env),
                          capture_output=True, text=True, timeout=240)


def test_demo_misses_then_hits_in_two_processes_with_correct_results(pocl):
    proc = clmagic("demo", "--device", pocl)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("process 1: MISS") and "result correct" in lines[1]
    assert lines[2].startswith("process 2: HIT") and "build was" in lines[2]
    assert "result correct" in lines[2] and "faster from the cache" in lines[3]


def test_info_lists_devices_even_when_the_device_setting_is_unusable(tmp_path, pocl):
    proc = clmagic("info", CLMAGIC_DEVICE="no-such-device", CLMAGIC_CACHE_DIR=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert f"cache:   {tmp_path}" in proc.stdout and "(read-only" not in proc.stdout
    assert "Portable Computing Language" in proc.stdout and "Oclgrind" in proc.stdout


def test_devices_marks_the_default(pocl):
    proc = clmagic("devices", CLMAGIC_DEVICE=pocl)
    marked = [ln for ln in proc.stdout.splitlines() if ln.startswith("*")]
    assert proc.returncode == 0 and len(marked) == 1 and pocl in marked[0]


def test_version_and_no_internal_command_or_markup_in_what_a_user_reads():
    from clmagic._version import __version__

    version = clmagic("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"clmagic {__version__}"
    helped, wrong = clmagic("--help"), clmagic("bogus")
    assert helped.returncode == 0 and wrong.returncode == 2
    for text in (helped.stdout, wrong.stderr):
        assert "_demo-child" not in text and "``" not in text
    assert wrong.stderr.startswith("clmagic: 'bogus' is not a clmagic command; commands: demo,")


def test_an_unknown_command_names_the_nearest():
    for typo, meant in (("lss", "ls"), ("confg", "config"), ("stat", "stats"),
                        ("exprot", "export")):
        proc = clmagic(typo)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr == (f"clmagic: '{typo}' is not a clmagic command; did you mean "
                               f"'{meant}'? (clmagic --help)\n")


def test_info_lists_only_the_variables_clmagic_reads(tmp_path, pocl):
    """PYOPENCL_HOME is pyopencl's own (it sets it at import); POCL_DEVICES is the driver's:
    neither changes clmagic, so neither is listed; the ones that do are."""
    proc = clmagic("info", CLMAGIC_CACHE_DIR=str(tmp_path), PYOPENCL_HOME="/somewhere",
                   POCL_DEVICES="pthread", PYOPENCL_BUILD_OPTIONS="-DX=1",
                   POCL_EXTRA_BUILD_FLAGS="-DY=2", CLMAGIC_DEVICE=pocl)
    assert proc.returncode == 0, proc.stderr
    listed = [ln.split()[1].split("=")[0] for ln in proc.stdout.splitlines()
              if ln.startswith("env:")]
    assert "PYOPENCL_HOME" not in listed and "POCL_DEVICES" not in listed
    assert {"CLMAGIC_CACHE_DIR", "CLMAGIC_DEVICE", "PYOPENCL_BUILD_OPTIONS",
            "POCL_EXTRA_BUILD_FLAGS"} <= set(listed)
