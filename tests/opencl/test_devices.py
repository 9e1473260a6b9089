"""Devices that cannot build here: probed once per process and only when a choice needs it,
marked with the reason (``list_devices``, ``clmagic devices``, the widget's dropdown), never a
default. A device is made unable to build with the drivers' own extra-options variables
(``POCL_EXTRA_BUILD_FLAGS``, ``OCLGRIND_BUILD_OPTIONS``): every build then fails in the driver's
compiler, as a POCL whose LLVM does not know the CPU does ("unknown target CPU 'generic'")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, SAXPY

import clmagic
from clmagic.opencl import devices

BROKEN = "-fclmagic-test-bogus"  # an option no compiler knows


def _env(**extra: str) -> dict[str, str]:
    """A child's environment: this checkout's clmagic, no device setting of the caller's and
    no ``COLUMNS`` (a width the run's terminal left would wrap ``clmagic devices``; into a
    pipe, as here, each device is one line, which the listing tests read)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CLMAGIC_DEVICE", "PYOPENCL_CTX", "POCL_EXTRA_BUILD_FLAGS",
                        "OCLGRIND_BUILD_OPTIONS", "COLUMNS")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _child(code: str, **env: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code], env=_env(**env), capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clmagic", *args], env=_env(**env),
                          capture_output=True, text=True, timeout=240)


LIST = """
import json, clmagic
from clmagic.opencl import devices
listed = clmagic.list_devices()
probed_by_listing = len(devices._verdicts)
try:
    default = devices.default_device()[0].spec
except clmagic.DeviceError as exc:
    default = "error: " + str(exc)
print(json.dumps({"probed_by_listing": probed_by_listing, "default": default,
                  "problems": {d.spec: d.problem for d in listed},
                  "names": {d.spec: d.platform_name for d in listed}}))
"""


def _spec_of(result: dict, part: str) -> str:
    return next(s for s, name in result["names"].items() if part in name.lower())


def test_a_pocl_that_cannot_build_is_marked_with_the_reason_and_never_the_default():
    out = _child(LIST, POCL_EXTRA_BUILD_FLAGS=BROKEN)
    pocl = _spec_of(out, "portable computing language")
    grind = _spec_of(out, "oclgrind")
    assert out["probed_by_listing"] == 0  # listing alone compiles nothing
    assert BROKEN in out["problems"][pocl]  # the driver's own words
    assert out["problems"][grind] is None
    assert out["default"] == grind  # the simulator, rather than a CPU driver that cannot build


def test_the_default_probes_only_up_to_the_first_device_that_builds(monkeypatch, pocl, oclgrind):
    calls: list[str] = []
    real = devices._probe
    monkeypatch.setattr(devices, "_verdicts", {})
    monkeypatch.setattr(devices, "_probe", lambda info: calls.append(info.spec) or real(info))
    clmagic.list_devices()
    assert devices._verdicts == {}  # listing compiles nothing
    assert devices.default_device()[0].spec == pocl  # a CPU driver ranks before the simulator
    assert calls == [pocl]  # Oclgrind was not probed: nothing needed it
    devices.default_device()
    assert clmagic.resolve_device(pocl)[0].usable
    assert calls == [pocl]  # once per process
    assert clmagic.resolve_device(oclgrind)[0].problem is None
    assert calls == [pocl, oclgrind]  # asked for, so probed, once


def test_builds_without_a_device_go_to_one_that_can_build():
    code = ("import json, clmagic\n"
            f"r = clmagic.build({SAXPY!r})\n"
            "print(json.dumps([r.outcome, r.device.platform_name]))\n")
    outcome, platform = _child(code, POCL_EXTRA_BUILD_FLAGS=BROKEN, CLMAGIC_CACHE_DIR="off")
    assert outcome == "MISS" and platform == "Oclgrind"


def test_a_spec_that_several_devices_match_picks_the_one_that_builds():
    # "in" is part of both "Oclgrind" and "Computing": the first match (Oclgrind) unless it
    # cannot build
    code = "import json, clmagic; print(json.dumps(clmagic.resolve_device('in')[0].platform_name))"
    assert _child(code) == "Oclgrind"
    assert "Portable" in _child(code, OCLGRIND_BUILD_OPTIONS=BROKEN)


def test_clmagic_devices_says_which_device_cannot_build_and_why():
    proc = _cli("devices", POCL_EXTRA_BUILD_FLAGS=BROKEN)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    pocl_lines = [ln for ln in lines if "Portable Computing Language" in ln]  # one or more
    (grind_line,) = [ln for ln in lines if "Oclgrind" in ln]
    for line in pocl_lines:
        assert f"cannot build here: Invalid build option: {BROKEN}" in line
        assert line.startswith(" ")  # not the default
    assert pocl_lines and grind_line.startswith("*") and "cannot build" not in grind_line


def test_when_no_device_can_build_the_listing_says_so_and_nothing_crashes():
    broken = dict(POCL_EXTRA_BUILD_FLAGS=BROKEN, OCLGRIND_BUILD_OPTIONS=BROKEN)
    out = _child(LIST, **broken)
    assert out["default"].startswith("error: no OpenCL device here can build a program")
    assert all(BROKEN in p for p in out["problems"].values())
    proc = _cli("devices", **broken)
    assert proc.returncode == 0
    assert proc.stdout.count("cannot build here") == len(out["problems"]) == len(
        proc.stdout.splitlines())
    assert not [ln for ln in proc.stdout.splitlines() if ln.startswith("*")]
    assert "no default device" in proc.stderr and "Traceback" not in proc.stderr


WIDGET = """
import json, clmagic
w = clmagic.CacheWidget(plot=False)
labels = {spec: text for text, spec in w.device.options}
start = w.device.value
pocl = next(s for s, t in labels.items() if t.startswith("POCL "))
w.device.value = pocl  # looked at: its entries are shown, but it cannot be the build device
disabled = w.use_button.disabled
w.use_button.click()
print(json.dumps({"labels": labels, "start": start, "pocl": pocl, "disabled": disabled,
                  "builds_on": clmagic.get_compiler().resolve()[0].platform_name,
                  "message": w.message.value, "errors": w.errors.value}))
"""


def test_the_widget_dropdown_marks_a_device_that_cannot_build_and_does_not_build_there():
    out = _child(WIDGET, POCL_EXTRA_BUILD_FLAGS=BROKEN, CLMAGIC_CACHE_DIR="off")
    assert f"cannot build here: Invalid build option: {BROKEN}" in out["labels"][out["pocl"]]
    assert "Oclgrind" in out["labels"][out["start"]]  # the default it opened with
    assert out["builds_on"] == "Oclgrind" and out["errors"] == ""
    assert out["disabled"] and "cannot build here" in out["message"]


@pytest.mark.parametrize("spec", ["P:D", "oclgrind", "fingerprint"])
def test_a_spec_only_one_device_matches_is_used_without_a_probe(spec, monkeypatch, pocl,
                                                                 oclgrind):
    wanted = pocl if spec != "oclgrind" else oclgrind
    given = {"P:D": pocl, "oclgrind": "oclgrind",
             "fingerprint": clmagic.resolve_device(pocl)[0].fingerprint}[spec]
    monkeypatch.setattr(devices, "_verdicts", {})
    info = clmagic.resolve_device(given)[0]
    assert info.spec == wanted
    assert devices._verdicts == {}  # the user's choice stands; no compile was needed


# -- one short name per device ---------------------------------------------------------------

def test_two_pocls_that_name_their_cpu_alike_get_two_short_names():
    """Binder has Debian's POCL 3.1 and the wheel's POCL 3.0, both naming the CPU the same: the
    short name carries POCL's version, and trademark signs do not lengthen it."""
    from clmagic._format import device_label

    cpu = "pthread-skylake-avx512-AMD EPYC 7763 64-Core Processor"
    debian = device_label("Portable Computing Language", cpu, "3.1+debian")
    wheel = device_label("Portable Computing Language", cpu, "3.0-rc2")
    assert debian != wheel
    assert debian == "POCL 3.1 pthread-skylake-avx512-AMD EPYC 7763 64-Core"
    assert device_label("NVIDIA CUDA", "NVIDIA H200", "550.54") == "NVIDIA H200"
    assert device_label("Oclgrind", "Oclgrind Simulator", "21.10") == "Oclgrind Simulator"
    assert "(R)" not in device_label("Intel(R) OpenCL", "Intel(R) Xeon(R) Gold 6230", "")


def test_a_device_has_the_same_short_name_in_every_view(tmp_path, pocl):
    """The result line, the history, the stats' device table, the panel's device list, the
    cache table and ``clmagic ls`` all call a device by :attr:`DeviceInfo.label`, whether the
    name comes from the device or from a stored entry of it."""
    from clmagic.cache.manage import entry_label, stats
    from clmagic.config import Settings
    from clmagic.show.cache import device_option
    from clmagic.show.frames import cache_frame, frame_html, history_frame
    from clmagic.show.views import text_of

    labels = [i.label for i in clmagic.list_devices()]
    assert len(set(labels)) == len(labels), labels  # this machine's two POCLs apart too
    c = clmagic.Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(tmp_path)}))
    r = c.build(SAXPY, None, pocl)
    c.flush()
    info = clmagic.resolve_device(pocl)[0]
    label = info.label
    assert r.device.label == label and label in text_of(r)
    assert list(history_frame(compiler=c)["device"]) == [label]
    (entry,) = c.store.entries()
    assert entry_label(entry.meta) == label
    assert [d.label for d in stats(c).devices] == [label]
    assert device_option(info).startswith(label)
    table = frame_html(cache_frame(compiler=c), "cache")
    assert f">{label}<" in table or f'title="{label}"' in table  # whole, or cut with a tooltip
    ls = _cli("ls", "--device", pocl, CLMAGIC_CACHE_DIR=str(tmp_path), COLUMNS="200")
    assert ls.returncode == 0 and label in ls.stdout, ls.stdout + ls.stderr
