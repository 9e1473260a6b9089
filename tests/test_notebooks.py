"""Notebooks executed top to bottom in real Jupyter kernels against a fresh cache."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from conftest import ROOT, child_env
from nbclient import NotebookClient

NOTEBOOKS = ROOT / "notebooks"


def execute(path: Path, cwd: Path, **env: str) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(cwd)}})
    import os

    saved = dict(os.environ)
    os.environ.update(child_env(**env))
    try:
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return nb


def outcomes(nb) -> list[str]:
    """The HIT/MISS word of every %%clkernel report, in cell order."""
    words = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            assert out.output_type != "error", f"error in cell:\n{cell.source}\n{out}"
            html = out.get("data", {}).get("text/html", "")
            if "clmagic-result" in html:
                words.append(html.split('data-outcome="')[1].split('"')[0])
    return words


def test_notebooks_have_no_committed_outputs_and_a_kernelspec():
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        assert nb.metadata.get("kernelspec", {}).get("name") == "python3", path.name
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, path.name


def test_getting_started_misses_then_hits_in_a_new_kernel(tmp_path, pocl):
    env = dict(CLMAGIC_CACHE_DIR=str(tmp_path / "cache"), CLMAGIC_DEVICE=pocl)
    path = NOTEBOOKS / "01-getting-started.ipynb"
    first = outcomes(execute(path, tmp_path, **env))
    second = outcomes(execute(path, tmp_path, **env))
    assert first == ["MISS", "MEMORY", "MISS"]
    assert second == ["HIT", "MEMORY", "HIT"]


@pytest.fixture(autouse=True)
def _kernel_available():
    from jupyter_client.kernelspec import KernelSpecManager

    if "python3" not in KernelSpecManager().find_kernel_specs():
        pytest.fail("no python3 kernel spec: pip install ipykernel")
