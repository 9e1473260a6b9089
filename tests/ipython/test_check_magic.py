"""%clcheck in a real IPython shell: a kernel of a %%clkernel cell, checked under the real
Oclgrind, its finding shown at the cell's own line (the magic's line counted), as the notebook
shows it (the text and HTML views registered with the shell's formatters)."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

from clmagic.cache.checker.findings import CheckReport
from clmagic.errors import OptionsError

CELL = """\
__kernel void add_one(__global float *y)
{
    int i = get_global_id(0);
    y[i + 1] += 1.0f;
}
"""


def test_clcheck_shows_an_off_by_one_write_at_the_cells_line(shell, pocl):
    shell.run_cell_magic("clkernel", f"--device {pocl} -q", CELL)
    ns = shell.user_ns
    ns["y"] = cl.Buffer(ns["cl_ctx"], cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                        hostbuf=np.zeros(32, np.float32))
    report = shell.run_line_magic("clcheck", "add_one(cl_queue, (32,), (8,), y)")
    assert isinstance(report, CheckReport)
    # the cell's 5th line (the %%clkernel line is its first): the += reads and writes (a write
    # is shown first: it is what breaks memory)
    assert [(f.kind, f.line) for f in report.findings] == [("invalid write", 5),
                                                            ("invalid read", 5)]
    data, _ = shell.display_formatter.format(report)
    text, page = data["text/plain"], data["text/html"]
    assert text.splitlines()[0] == "FOUND   add_one: 2 problems: 1 invalid write, 1 invalid read"
    assert "line 5:14: invalid read of 4 bytes past the end of argument `y` (index 32 of 32)" \
        in text
    assert "   5 |     y[i + 1] += 1.0f;" in text and "by work-item 31 (group 3)" in text
    assert 'class="clmagic-check" data-outcome="FOUND"' in page and "clmagic-finding" in page


def test_clcheck_says_how_it_is_written(shell):
    with pytest.raises(OptionsError, match="usage: %clcheck"):
        shell.run_line_magic("clcheck", "add_one")
    with pytest.raises(OptionsError, match="--timeout 0: give a number of seconds over 0"):
        shell.run_line_magic("clcheck", "--timeout 0 k(q, 1, None)")
