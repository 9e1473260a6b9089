"""What a user reads under a cell and in the tables (issue 16): warnings on the result line with
the cell's line numbers and no temp paths, the driver's "N warnings generated." kept out of the
cell. The same is checked on the page by tests/test_browser.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import SAXPY, child_env, last_json, run_child
from IPython.utils.capture import capture_output

from clmagic._format import fmt_ms
from clmagic.show import text_of

WARNS = """\
__kernel void w(__global int *a)
{
    int i = get_global_id(0);
    if (i = 0) a[0] = 1;
}
"""


def test_a_warning_is_counted_on_the_line_and_shown_with_cell_lines(shell, pocl):
    with capture_output() as cap:
        res = shell.run_cell(f"%%clkernel --device {pocl}\n{WARNS}")
    assert res.success
    (result,) = [o for o in cap.outputs if "text/html" in o.data]
    text, page = result.data["text/plain"], result.data["text/html"]
    assert text.startswith("MISS") and text.endswith("1 warning")
    assert "<summary>1 warning</summary>" in page
    assert "warning: line 5:11: using the result of an assignment" in page  # the cell's line 5
    assert ".cl:" not in page and "tempfile" not in page
    assert "generated" not in cap.stderr + cap.stdout


CHATTY = f"""
import json, os, clmagic
from clmagic.opencl import driver
r = clmagic.build({WARNS!r})
with driver.quiet_driver():
    os.write(2, b"1 warning generated.\\n")
    os.write(2, b"the driver said something else\\n")
print(json.dumps(r.build_log))
"""


def test_the_driver_chatter_stays_off_stderr_and_the_rest_goes_through(pocl):
    proc = subprocess.run([sys.executable, "-c", CHATTY], capture_output=True, text=True,
                          env=child_env(CLMAGIC_DEVICE=pocl, CLMAGIC_CACHE_DIR="off"),
                          timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "warning:" in json.loads(proc.stdout.splitlines()[-1])  # the log has the warning
    assert "generated" not in proc.stderr
    assert proc.stderr.strip() == "the driver said something else"


def test_a_build_that_moves_cl_ctx_to_another_device_says_so(shell, pocl, oclgrind):
    saxpy = "__kernel void k(__global float *y) { y[get_global_id(0)] = 1.0f; }\n"
    with capture_output() as first:
        assert shell.run_cell(f"%%clkernel --quiet --device {pocl}\n{saxpy}").success
    with capture_output() as same:
        assert shell.run_cell(f"%%clkernel --quiet --device {pocl}\n{saxpy}").success
    assert "cl_ctx" not in first.stdout + same.stdout  # first binding, same device: nothing
    with capture_output() as moved:
        assert shell.run_cell(f"%%clkernel --quiet --device {oclgrind}\n{saxpy}").success
    (line,) = moved.stdout.splitlines()
    assert line.startswith("clmagic: cl_ctx and cl_queue now belong to Oclgrind Simulator")
    assert "buffers made with the old cl_ctx do not work" in line


def test_the_line_says_where_a_trip_spent_its_time(compiler, oclgrind):
    from clmagic.opencl import devices

    devices.forget_contexts()  # a fresh kernel: the device's first use
    source = "__kernel void f(__global float *y) { y[0] = 3.0f; }\n"
    first = compiler.build(source, device=oclgrind)
    again = compiler.build(source.replace("3.0f", "4.0f"), device=oclgrind)
    assert first.record.setup_ms > again.record.setup_ms  # the context was made by the first
    said = f"+ {fmt_ms(first.record.setup_ms)} to set up the device (first use)"
    assert (said in text_of(first)) == (first.record.setup_ms >= 5)
    assert "set up the device" not in text_of(again)  # said once
    line = text_of(again)
    assert line.startswith("MISS") and f"built in {fmt_ms(again.build_ms)}" in line
    if again.ms - again.build_ms > max(1.0, 0.05 * again.ms):
        assert f"{fmt_ms(again.ms)} in all" in line  # r.ms, the trip, is on the line too


def test_a_miss_says_what_is_new_against_the_closest_entry(compiler, oclgrind, tmp_path,
                                                           monkeypatch):
    src = "__kernel void m(__global float *y) { y[get_global_id(0)] *= 2.0f; }\n"
    first = compiler.build(src, device=oclgrind)
    assert first.note.startswith("first build of these kernels on this device")
    opts = compiler.build(src, "-cl-mad-enable", device=oclgrind)
    assert f"new options (the closest entry, {first.key[:4]}…, had none)" in opts.note
    longer = compiler.build(src.replace("2.0f", "2.0f + 1.0f"), device=oclgrind)
    assert (f"new source ({first.key[:4]}… of the same kernels and options had {len(src)} bytes, "
            f"this has {len(src) + 7})") in longer.note
    same_size = compiler.build(src.replace("2.0f", "3.0f"), device=oclgrind)
    assert "new source (same size as" in same_size.note
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h.h").write_text("#define F 2.0f\n")
    inc = '#include "h.h"\n' + src.replace("2.0f", "F")
    compiler.build(inc, device=oclgrind)
    header = tmp_path / "h.h"
    header.write_text("#define F 4.0f\n")  # the header changed, not the source
    built = next(e for e in compiler.store.entries() if e.meta.headers).meta.created
    os.utime(header, (built + 2, built + 2))  # edited after that build, whatever the clock's step
    again = compiler.build(inc, device=oclgrind)
    assert again.outcome == "MISS"
    near = next(e for e in compiler.store.entries() if e.meta.created == built)
    assert f"header h.h changed since {near.key[:4]}… was built" in again.note
    assert compiler.build(inc, device=oclgrind).outcome == "MEMORY"  # no reason on non-misses
    (tmp_path / "g.h").write_text("#define F 4.0f\n")
    other = compiler.build(inc.replace('"h.h"', '"g.h"'), device=oclgrind)  # same size
    assert "reads new header g.h (" in other.note and "did not)" in other.note



SHOWN = "__kernel void shown(__global int *a) { a[get_global_id(0)] = 3; }\n"


def _cell(shell, line: str = "") -> list:
    with capture_output() as cap:
        res = shell.run_cell(f"%%clkernel {line}\n{SHOWN}")
    assert res.success, res.error_in_exec
    return [o.data for o in cap.outputs]


@pytest.mark.parametrize("outcome", ["MISS", "HIT", "MEMORY", "BYPASS", "warning"])
def test_the_published_line_is_what_display_of_the_result_shows(shell, compiler, settings,
                                                                  pocl, outcome):
    """The magic publishes the line itself, made once (no formatter asked): the same text and
    HTML as ``display(result)`` makes through IPython's formatters."""
    from clmagic.show.line import result_bundle
    from clmagic.trip.compiler import Compiler

    source = WARNS if outcome == "warning" else SHOWN
    r = compiler.build(source, "-O2", pocl, line_offset=1, use_cache=outcome != "BYPASS")
    if outcome in ("HIT", "MEMORY"):
        assert r.settled  # the save done
        again = compiler if outcome == "MEMORY" else Compiler(settings)
        r = again.build(source, "-O2", pocl, line_offset=1)
    assert r.outcome == ("MISS" if outcome == "warning" else outcome)
    assert r.settled  # "saving" → "saved" between two renderings otherwise
    assert shell.display_formatter.format(r) == (result_bundle(r), {})


def test_a_formatter_registered_for_build_results_is_used_under_the_cell(shell, pocl):
    from clmagic.trip.results import BuildResult

    html = shell.display_formatter.formatters["text/html"]
    html.for_type(BuildResult, lambda r: f"<b>mine {r.outcome}</b>")
    try:
        (data,) = _cell(shell, f"--device {pocl}")
    finally:
        html.pop(BuildResult)
    assert data["text/html"] == "<b>mine MISS</b>" and data["text/plain"].startswith("MISS")


def test_a_shell_showing_text_only_gets_the_text_line_only(shell, pocl):
    html = shell.display_formatter.formatters["text/html"]
    html.enabled = False
    try:
        (data,) = _cell(shell, f"--device {pocl}")
    finally:
        html.enabled = True
    assert list(data) == ["text/plain"] and data["text/plain"].startswith("MISS")


def test_every_view_names_a_class_defined_where_it_says():
    """The views are registered by type name: a type moved or renamed would silently lose its
    line under a cell, so every name in the table is a class defined in that module, and both
    of its renderers exist."""
    import importlib

    from clmagic.show.views import VIEWS

    for (module, name), (where, text, page) in VIEWS.items():
        renderers = {where: importlib.import_module(f"clmagic.show.{where}")}
        cls = getattr(importlib.import_module(module), name)
        assert isinstance(cls, type) and (cls.__module__, cls.__name__) == (module, name)
        renderer = renderers[where]
        assert callable(getattr(renderer, text)) and callable(getattr(renderer, page))


def test_every_report_shows_its_view_through_the_shells_formatters(shell, compiler, tmp_path):
    """What a cell shows of each report (its value) is its view in text and HTML, the same as
    ``text_of`` / ``html_of`` give outside IPython; the data type's own repr is not its view."""
    from clmagic.cache.bundle import export_bundle, import_bundle
    from clmagic.cache.manage import cache_info, clear_cache, stats
    from clmagic.cache.warm import WarmReport
    from clmagic.show import html_of, text_of

    built = compiler.build(SAXPY)
    assert built.settled
    reports = [built, stats(compiler), cache_info(compiler),
               export_bundle(tmp_path / "b.db", store=compiler.store),
               import_bundle(tmp_path / "b.db", store=compiler.store),
               clear_cache(compiler=compiler), WarmReport(built=["a.cl"], failed=[("b.cl", "x")])]
    for obj in reports:
        page = html_of(obj)
        assert page is not None and page.startswith("<") and text_of(obj) != repr(obj)
        assert shell.display_formatter.format(obj) == ({"text/plain": text_of(obj),
                                                        "text/html": page}, {})


SHOWN_WITHOUT_EXTENSION = f"""
import json, sys
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
import clmagic
r = clmagic.build({SHOWN!r})
r.settled  # the save done: both views below are of the same moment ("saved")
data, _ = ip.display_formatter.format(r)
print(json.dumps({{"data": data, "text": clmagic.show.text_of(r), "repr": repr(r)}}))
"""

PLAIN_PYTHON = f"""
import json, sys
import clmagic
from clmagic.show import html_of, text_of
r = clmagic.build({SHOWN!r})
r.settled  # the save done: both views below are of the same moment
print(json.dumps({{"text": text_of(r), "html": html_of(r), "repr": repr(r),
                   "ipython": "IPython" in sys.modules}}))
"""


def test_a_build_in_ipython_shows_its_line_without_load_ext(pocl, tmp_path):
    out = last_json(run_child(SHOWN_WITHOUT_EXTENSION, CLMAGIC_DEVICE=pocl,
                              CLMAGIC_CACHE_DIR=str(tmp_path / "c")))
    assert out["data"]["text/plain"] == out["text"] and out["text"].startswith("MISS")
    assert 'class="clmagic-result" data-outcome="MISS"' in out["data"]["text/html"]
    assert out["repr"].startswith("<BuildResult MISS shown key ")


def test_plain_python_gets_the_line_from_show_and_never_imports_ipython(pocl, tmp_path):
    out = last_json(run_child(PLAIN_PYTHON, CLMAGIC_DEVICE=pocl,
                              CLMAGIC_CACHE_DIR=str(tmp_path / "c")))
    assert out["text"].startswith("MISS   shown · built in ") and "data-outcome" in out["html"]
    assert out["repr"].startswith("<BuildResult MISS shown key ") and not out["ipython"]
