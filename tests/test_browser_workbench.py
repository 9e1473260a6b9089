"""The kernel workbench in a real browser (issue 25): JupyterLab and Chromium as in
tests/test_browser.py (its fixtures and helpers, imported), a notebook that folds a kernel's
facts under its result line, asks for the compiled code (POCL has no PTX: the message says what
its binary is), sweeps a define with one variant refused, plots the sweep and shows the facts of
the entry selected in the cache panel. Each part is screenshotted into test-artifacts/."""

from __future__ import annotations

import pytest
from test_browser import (  # noqa: F401  (lab and page are fixtures)
    ARTIFACTS,
    cell,
    expect_count,
    expect_text,
    lab,
    open_new_notebook,
    page,
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
    "plot": "ax = clmagic.plot_sweep(_)",
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
    expect_text(table, "SCALE 3 is refused")
    expect_text(sweep, "not reported by this driver: registers")  # POCL: no empty columns
    assert "regs" not in table.locator("thead").inner_text()
    # the plot: one figure, the three variants that built
    plot = cell(page, CELLS, "plot")
    plot.scroll_into_view_if_needed()
    expect_count(plot.locator(".jp-OutputArea-output img"), 1)
    assert "<Figure" not in plot.locator(".jp-OutputArea").inner_text()
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
