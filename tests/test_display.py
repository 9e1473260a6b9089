"""What a user reads under a cell and in the tables (issue 16): warnings on the result line with
the cell's line numbers and no temp paths, the driver's "N warnings generated." kept out of the
cell. The same is checked on the page by tests/test_browser.py."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import child_env
from IPython.utils.capture import capture_output

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
from clmagic import driver
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
