"""The kernel workbench in a real browser (issue 25): JupyterLab and Chromium as in
tests/test_browser.py (its fixtures and helpers, imported), a notebook that folds a kernel's
facts under its result line, asks for the compiled code (POCL has no PTX: the message says what
its binary is), sweeps a define with one variant refused, plots the sweep and shows the facts of
the entry selected in the cache panel. Each part is screenshotted into test-artifacts/."""

from __future__ import annotations

import pytest
from test_browser import (  # noqa: F401  (lab and page are fixtures)
    ARTIFACTS,
    KERNEL_IDLE,
    cell,
    expect_count,
    expect_text,
    lab,
    open_new_notebook,
    page,
    run_all,
    wait_idle,
)

pytestmark = pytest.mark.browser

KERNEL = """\
#if SCALE == 3
#error "SCALE 3 is refused (to show a variant that does not build)"
#endif
__kernel void scaled(__global const float *x, __global float *y)
{
    const int i = get_global_id(0);
    y[i] = SCALE * x[i];
}"""

LAUNCH = """\
def launch(r):
    x = np.arange(4096, dtype=np.float32)
    mf = cl.mem_flags
    xb = cl.Buffer(r.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    yb = cl.Buffer(r.context, mf.WRITE_ONLY, x.nbytes)
    t = clmagic.time_kernel(r.kernels["scaled"], r.queue, x.shape, None, xb, yb, repeats=3)
    y = np.empty_like(x)
    cl.enqueue_copy(r.queue, y, yb)
    scale = int(r.options.effective.split("SCALE=")[1].split()[0])
    assert np.allclose(y, scale * x)
    return t"""

CELLS = {
    "load": "%load_ext clmagic\nimport numpy as np\nimport pyopencl as cl\nimport clmagic",
    "kernel": "%%clkernel --show ptx --opts -DSCALE=2 -cl-kernel-arg-info\n" + KERNEL,
    "launch": LAUNCH,
    "sweep": "%%clkernel --sweep SCALE=1,2,3,4 --run launch\n" + KERNEL,
    "plot": "clmagic.plot_sweep(_)",  # the cell's last line: the plot, nothing printed
    "widget": "%clcache widget",
}


def test_the_workbench_reads_clearly(lab, page, tmp_path):
    url, cache = lab
    ARTIFACTS.mkdir(exist_ok=True)
    open_new_notebook(page, url, tmp_path / "root", "workbench.ipynb", CELLS)
    for where in ("stderr", "error"):
        kind = f"application/vnd.jupyter.{where}"
        assert page.locator(f"[data-mime-type='{kind}']").count() == 0, where

    # the facts, folded under the result line: closed, then opened by a click
    kernel = cell(page, CELLS, "kernel")
    result = kernel.locator(".clmagic-result")
    expect_text(result, "MISS")
    fold = kernel.locator("details.clmagic-facts")
    expect_text(fold.locator("summary"), "kernel facts (1 kernel)")
    assert not fold.locator("pre").is_visible()
    fold.locator("summary").click()
    expect_text(fold.locator("pre"), "scaled · wg ≤ ")
    assert "local 0 B" in fold.locator("pre").inner_text()
    # --show ptx on POCL: no PTX, and one clear line of what there is instead
    code = kernel.locator(".clmagic-code")
    expect_text(code, "POCL keeps a poclbin archive")
    assert "PTX is shown on NVIDIA" in code.inner_text()
    kernel.scroll_into_view_if_needed()
    kernel.screenshot(path=str(ARTIFACTS / "browser-25-facts-and-code.png"))

    # the sweep: a table with the refused variant's first error line, the best one bound
    sweep = cell(page, CELLS, "sweep").locator(".jp-OutputArea")
    expect_text(sweep, "best: -DSCALE=")
    table = sweep.locator(".clmagic-frame table")
    expect_count(table.locator("tbody tr"), 4)
    expect_text(table, "FAILED")
    # the refused variant's first error line: its start in the cell (the table fits the output
    # area: a long value is cut with …), in full in the cell's tooltip
    error = table.locator("tbody tr", has_text="FAILED").locator("td").last
    shown, full = error.inner_text(), error.get_attribute("title") or error.inner_text()
    assert "SCALE 3 is refused (to show a variant that does not build)" in full, (shown, full)
    assert shown == full or (shown.endswith("…") and full.startswith(shown[:-1])), (shown, full)
    expect_text(sweep, "not reported by this driver: registers")  # POCL: no empty columns
    assert "regs" not in table.locator("thead").inner_text()
    # the plot: one figure, the three variants that built
    plot = cell(page, CELLS, "plot")
    plot.scroll_into_view_if_needed()
    expect_count(plot.locator(".jp-OutputArea-output img"), 1)
    shown = plot.locator(".jp-OutputArea").inner_text()
    assert "<Figure" not in shown and "<Axes" not in shown
    cell(page, CELLS, "sweep").screenshot(path=str(ARTIFACTS / "browser-25-sweep.png"))
    plot.screenshot(path=str(ARTIFACTS / "browser-25-sweep-plot.png"))

    # the cache panel: selecting an entry shows its kernel facts under the table
    panel = cell(page, CELLS, "widget").locator(".clmagic-widget")
    expect_text(panel.locator(".widget-html").filter(has_text="entries ·"), "4 entries")
    select = panel.locator(".clmagic-table select")
    first = select.locator("option").first.get_attribute("value")
    select.select_option(value=first)
    expect_text(panel.locator("pre.clmagic-facts"), "kernel facts of the selection:")
    expect_text(panel.locator("pre.clmagic-facts"), "scaled · wg ≤ ")
    panel.scroll_into_view_if_needed()
    panel.screenshot(path=str(ARTIFACTS / "browser-25-panel-facts.png"))
    assert any(cache.rglob("sweeps/*.json"))  # the sweep's timings, in the cache folder


CHECK_CELLS = {
    "load": CELLS["load"],
    "kernel": """%%clkernel
__kernel void shift_right(__global const float *x, __global float *y)
{
    int i = get_global_id(0);
    y[i + 1] = x[i];
}""",
    "buffers": """n = 64
mf = cl.mem_flags
x_buf = cl.Buffer(cl_ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.arange(n, dtype=np.float32))
y_buf = cl.Buffer(cl_ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.zeros(n, np.float32))""",
    "check": "%clcheck shift_right(cl_queue, (n,), (16,), x_buf, y_buf)",
}


def test_a_finding_reads_under_its_cell(lab, page, tmp_path):
    """%clcheck (issue 36): the finding under the cell, its cell line with the caret under the
    store, all of it in the output area's width."""
    url, _ = lab
    ARTIFACTS.mkdir(exist_ok=True)
    open_new_notebook(page, url, tmp_path / "root", "check.ipynb", CHECK_CELLS)
    out = cell(page, CHECK_CELLS, "check").locator(".clmagic-check")
    expect_text(out, "FOUND")
    assert out.get_attribute("data-outcome") == "FOUND"
    text = out.inner_text()
    assert "shift_right: 1 problem: 1 invalid write" in text
    assert "line 5:14: invalid write of 4 bytes past the end of argument `y` (index 64 of 64)" \
        in text
    assert "   5 |     y[i + 1] = x[i];\n     |              ^" in text
    assert "by work-item 63 (group 3)" in text
    assert out.evaluate("e => e.scrollWidth <= e.closest('.jp-OutputArea').clientWidth")
    cell(page, CHECK_CELLS, "kernel").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "browser-36-finding.png"))


@pytest.mark.slow  # over 12 s: the default run stays under 5 min on 2 cores
def test_notebook_6_finds_each_bug_and_passes_each_fix(lab, page, tmp_path):
    import shutil

    from conftest import ROOT

    url, _ = lab
    ARTIFACTS.mkdir(exist_ok=True)
    name = "06-finding-bugs.ipynb"
    shutil.copy2(ROOT / "notebooks" / name, tmp_path / "root" / name)
    page.goto(f"{url}/lab/tree/{name}")
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    page.evaluate("() => { window.jupyterapp.commands.execute('application:toggle-left-area'); }")
    page.wait_for_function(KERNEL_IDLE)
    run_all(page)
    page.wait_for_function(
        "() => document.querySelectorAll('.jp-OutputArea .clmagic-check').length === 4")
    wait_idle(page)
    checks = page.locator(".jp-OutputArea .clmagic-check")
    assert [checks.nth(i).get_attribute("data-outcome") for i in range(4)] == \
        ["FOUND", "CLEAN", "FOUND", "CLEAN"]
    assert page.locator("[data-mime-type='application/vnd.jupyter.stderr']").count() == 0
    checks.nth(0).scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "browser-36-notebook-off-by-one.png"))
    racy = checks.nth(2)
    expect_text(racy, "data race on argument `part` (index 1 of 16)")
    racy.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "browser-36-notebook-race.png"))
    checks.nth(3).scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "browser-36-notebook-fixed.png"))
