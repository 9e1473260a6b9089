"""Every clmagic table fits JupyterLab's default layout (issue 35, item 3): a 1280×800 window with
the file browser open leaves an output area of about 828 px, and each table clmagic draws (the
cache, the history, a sweep, the kernels, a slice of the kernels frame as notebook 3 takes it,
the statistics, where the cache is, a timing, the panel) is measured there, in the light and
the dark theme: its scrollWidth within its output area, nothing past the edge. Screenshots of
each, in both themes, are left in test-artifacts/ (browser-35-*.png) to be looked at."""

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
from test_browser_workbench import KERNEL, LAUNCH

# slow too: JupyterLab twice (light, dark), 22 s; the default run stays under 5 min on 2 cores
pytestmark = [pytest.mark.browser, pytest.mark.slow]

# a program with long kernel names, built with long options and an include path: the widest
# values a user's tables hold
LONG = """\
%%clkernel --opts -cl-mad-enable -cl-fast-relaxed-math -DTILE=16 -DVECTOR_WIDTH=4 -cl-std=CL1.2
__kernel void accumulate_the_partial_sums_of_every_tile(__global const float *x,
                                                        __global float *partial_sums_out)
{ partial_sums_out[get_global_id(0)] = TILE * x[get_global_id(0)]; }
__kernel void normalise_by_the_largest_value(__global float *y) { y[get_global_id(0)] /= 2.0f; }"""

INCLUDE = """\
import os
INC = os.path.join(os.path.dirname(pyopencl.__file__), "cl")
clmagic.build("__kernel void inc(__global float *y) { y[get_global_id(0)] += 1.0f; }",
              ["-I", INC, "-DA_RATHER_LONG_DEFINE_NAME=1"])"""

BUFFERS = """\
x = np.arange(4096, dtype=np.float32)
xb = cl.Buffer(cl_ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
yb = cl.Buffer(cl_ctx, cl.mem_flags.WRITE_ONLY, x.nbytes)"""

CELLS = {
    "load": "%load_ext clmagic\nimport numpy as np\nimport pyopencl\nimport pyopencl as cl\n"
            "import clmagic",
    "empty": "%clcache history",  # before any build: said in words
    "long": LONG,
    "include": INCLUDE,
    "kernel": "%%clkernel --opts -DSCALE=2 -cl-kernel-arg-info\n" + KERNEL,
    "buffers": BUFFERS,
    "cltime": "%cltime -r 5 scaled(cl_queue, (4096,), None, xb, yb)",
    "launch": LAUNCH,
    "cache": "%clcache",
    "history": "%clcache history",
    "kernels": "%clcache kernels",
    "slice": 'kernels = clmagic.kernels_frame()\nkernels[kernels["kernel"] == "scaled"]'
             '[["key", "options", "work_group_size", "local_mem", "private_mem", "args"]]',
    "stats": "%clcache stats",
    "info": "%clcache info",
    "widget": "%clcache widget",
    "timeline": "clmagic.plot_history()",
    # last: a sweep's variants in the history, told apart by their options
    "sweep": "%%clkernel --sweep SCALE=1,2,3,4 --run launch\n" + KERNEL,
    "plot": "clmagic.plot_sweep(_)",
    "after": "%clcache history",
}

#: the outputs whose width is checked: every table and block clmagic draws
DRAWN = (".clmagic-frame, .clmagic-info, .clmagic-stats, .clmagic-timing, .clmagic-widget, "
         ".clmagic-result")

# each drawn block in each output area: its own width and scrollWidth, the output area's width,
# and how far its right edge is from the output area's
MEASURE = """([cell, selector]) => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')[cell]
    .querySelectorAll('.jp-OutputArea-output')].flatMap(out =>
    [...out.querySelectorAll(selector)].map(el => ({
        cls: el.className, text: el.innerText.slice(0, 60),
        scroll: el.scrollWidth, client: el.clientWidth, area: out.clientWidth,
        past: Math.round(el.getBoundingClientRect().right - out.getBoundingClientRect().right),
        tables: [...el.querySelectorAll('table')].map(t =>
            Math.round(t.getBoundingClientRect().right - out.getBoundingClientRect().right)),
        wide: [...el.querySelectorAll('*')].filter(k => k.getBoundingClientRect().right
            > out.getBoundingClientRect().right + 1 || k.scrollWidth > k.clientWidth + 1)
            .slice(0, 4).map(k => `${k.tagName}.${k.className} ${k.scrollWidth}/${k.clientWidth}`),
    })))"""


def _shots(page, theme: str) -> None:
    for name in ("long", "kernel", "cltime", "sweep", "plot", "cache", "history", "kernels",
                 "slice", "stats", "info", "widget", "timeline", "empty", "after"):
        where = cell(page, CELLS, name)
        where.scroll_into_view_if_needed()
        where.screenshot(path=str(ARTIFACTS / f"browser-35-{name}-{theme}.png"))
    page.screenshot(path=str(ARTIFACTS / f"browser-35-page-{theme}.png"))


def _all_fit(page, theme: str) -> list[dict]:
    blocks = []
    for i, name in enumerate(CELLS):  # each laid out in view (JupyterLab may skip the layout
        cell(page, CELLS, name).scroll_into_view_if_needed()  # of a cell out of view)
        page.wait_for_timeout(100)
        blocks += [{**b, "cell": name} for b in page.evaluate(MEASURE, [i, DRAWN])]
    assert all(b["client"] > 0 and b["area"] > 0 for b in blocks), blocks  # measured, laid out
    over = [b for b in blocks
            if b["scroll"] > b["client"] + 1 or b["past"] > 1 or any(t > 1 for t in b["tables"])]
    assert not over, f"{theme}: past the output area: {over}"
    return blocks


def test_every_table_fits_the_default_layout_in_both_themes(lab, page, tmp_path):
    url, _ = lab
    ARTIFACTS.mkdir(exist_ok=True)
    page.set_viewport_size({"width": 1280, "height": 800})
    open_new_notebook(page, url, tmp_path / "root", "tables.ipynb", CELLS, file_browser=True)
    assert page.locator(".jp-FileBrowser").is_visible()  # the layout a user starts with
    expect_text(cell(page, CELLS, "widget").locator(".clmagic-widget"), "entries ·")
    expect_count(cell(page, CELLS, "timeline").locator(".jp-OutputArea-output img"), 1)

    blocks = _all_fit(page, "light")
    areas = {b["area"] for b in blocks}
    assert max(areas) <= 860, areas  # the narrow layout was measured, not a wide one
    kinds = " ".join(b["cls"] for b in blocks)
    for drawn in ("clmagic-frame", "clmagic-info", "clmagic-stats", "clmagic-timing",
                  "clmagic-widget"):
        assert drawn in kinds, drawn
    # every table of a frame is a clmagic table: the slice of notebook 3 too, not pandas' own
    for name in ("cache", "history", "kernels", "slice"):
        expect_count(cell(page, CELLS, name).locator(".clmagic-frame table"), 1)
    # what tells rows apart stays in view: the options of sweep variants, short keys
    history = cell(page, CELLS, "history").locator(".clmagic-frame table")
    assert "options" in history.locator("thead").text_content()
    assert "-DSCALE" in history.text_content()
    # an option is cut with … and whole in its tooltip, never broken over lines at a hyphen
    heights = history.locator("tbody tr").evaluate_all(
        "rows => rows.map(r => r.getBoundingClientRect().height)")
    assert max(heights) < 2 * min(heights)
    cache = cell(page, CELLS, "cache").locator(".clmagic-frame table")
    assert {"hits", "last used"} <= set(cache.locator("thead th").all_text_contents())
    # empty: words, not a blank box; the facts have a legend; a noisy timing says so or not
    expect_text(cell(page, CELLS, "empty").locator(".jp-OutputArea"), "no builds in this "
                "session yet")
    facts = cell(page, CELLS, "kernel").locator("details.clmagic-facts")
    facts.locator("summary").click()
    expect_text(facts.locator(".clmagic-legend"), "wg ≤: the most work-items a group may have")
    info = cell(page, CELLS, "info").locator(".clmagic-info")
    assert "history:" in info.text_content() and "record:" not in info.text_content()
    _shots(page, "light")

    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme',"
                  " {theme: 'JupyterLab Dark'})")
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
    page.wait_for_timeout(1000)  # the theme's style sheet applied and the page laid out again
    _all_fit(page, "dark")
    # the plots have no white background of their own in the dark theme: their PNG's corner
    # is transparent
    corners = page.evaluate("""() => [...document.querySelectorAll(
        '.jp-OutputArea-output img')].map(img => {
            const c = document.createElement('canvas');
            c.width = img.naturalWidth; c.height = img.naturalHeight;
            const g = c.getContext('2d'); g.drawImage(img, 0, 0);
            return g.getImageData(1, 1, 1, 1).data[3]; })""")
    assert corners and all(alpha == 0 for alpha in corners), corners
    _shots(page, "dark")

    # the sweep (measured with the rest above): four variants, the refused one's error cut to
    # its start and whole in its tooltip, and the variants told apart in the history
    sweep = cell(page, CELLS, "sweep").locator(".clmagic-frame table")
    expect_count(sweep.locator("tbody tr"), 4)
    failed = sweep.locator("tbody tr").filter(has_text="FAILED")
    assert "SCALE 3 is refused" in (failed.locator("td[title]").last.get_attribute("title")
                                    or "")
    after = cell(page, CELLS, "after").locator(".clmagic-frame table")
    for scale in (1, 2, 4):
        expect_text(after, f"-DSCALE={scale}")
