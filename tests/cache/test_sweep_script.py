"""Sweeps from a plain script (issue 34, class 6): a script without ``if __name__ ==
"__main__":`` that calls ``clmagic.sweep(..., jobs=2)`` (or ``warm``) builds every variant in
the workers, and its top level runs once — the workers never import the user's main module,
however the script was started (a file, ``-c``, stdin, ``-m``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env

SCRIPT = '''
import json, os
import clmagic
from clmagic.cache.warm import warm
# the top level: every run of it leaves a line (a worker that re-ran it would add one)
with open(os.environ["RUNS"], "a") as fh:
    fh.write(f"{os.getpid()}\\n")
SRC = "__kernel void k(__global int *a) { a[get_global_id(0)] = V; }"
df = clmagic.sweep(SRC, {"V": [1, 2, 3]}, jobs=2, progress=False)
report = warm([os.environ["KERNELS"]], jobs=2)
print(json.dumps({"outcomes": list(df["outcome"]), "errors": list(df["error"]),
                  "built": len(report.built), "failed": report.failed}))
'''


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["file", "-c", "stdin", "-m"])
def test_a_plain_script_sweeps_with_workers(how: str, tmp_path: Path, pocl: str) -> None:
    folder = tmp_path / "user"
    folder.mkdir()
    (folder / "plain.py").write_text(SCRIPT)
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    for n in range(2):
        (kernels / f"k{n}.cl").write_text(f"__kernel void k(__global int *a) {{ a[0] = {n}; }}")
    runs = tmp_path / "runs.txt"
    cmd, stdin = {
        "file": ([sys.executable, str(folder / "plain.py")], None),
        "-c": ([sys.executable, "-c", SCRIPT], None),
        "stdin": ([sys.executable, "-"], SCRIPT),
        "-m": ([sys.executable, "-m", "plain"], None),
    }[how]
    proc = subprocess.run(cmd, input=stdin, cwd=str(folder), capture_output=True, text=True,
                          timeout=280, env=child_env(RUNS=str(runs), KERNELS=str(kernels),
                                                     CLMAGIC_CACHE_DIR=str(tmp_path / "c"),
                                                     CLMAGIC_DEVICE=pocl))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["outcomes"] == ["MISS", "MISS", "MISS"], out["errors"]
    assert out["built"] == 2 and out["failed"] == []
    assert len(runs.read_text().split()) == 1  # the script's top level ran once
