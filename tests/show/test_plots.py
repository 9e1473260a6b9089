"""A plot as a cell's last line shows the plot and nothing above it (issue 35): plot_sweep returns
nothing (``<Axes: …>`` was printed over the sweep's plot), draws on the caller's axes when given
one, and leaves its own figure to matplotlib, which shows it once."""

from __future__ import annotations

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import clmagic  # noqa: E402


def _sweep() -> pd.DataFrame:
    """A sweep's frame as sweep_frame makes it: two variants timed, one refused."""
    df = pd.DataFrame({"TS": [8, 16, 32], "outcome": ["MISS", "MISS", "FAILED"],
                       "build_ms": [90.0, 95.0, None], "error": ["", "", "line 3: no"],
                       "median_us": [120.0, 80.0, None], "min_us": [110.0, 75.0, None],
                       "spread_us": [10.0, 4.0, None]})
    df.attrs["best"] = {"TS": 16}
    return df


def test_plot_sweep_draws_on_the_callers_axes_and_returns_nothing():
    fig, ax = plt.subplots()
    try:
        assert clmagic.plot_sweep(_sweep(), ax=ax) is None
        assert [b.get_height() for b in ax.patches] == pytest.approx([120.0, 80.0])
        assert [t.get_text() for t in ax.get_xticklabels()] == ["TS=8", "TS=16"]
        assert "1 failed to build" in ax.get_title()
    finally:
        plt.close(fig)


def test_plot_sweep_as_a_cells_last_line_prints_nothing_above_the_plot(ipshell):
    from IPython.utils.capture import capture_output

    ipshell.user_ns["df"] = _sweep()
    before = set(plt.get_fignums())
    try:
        with capture_output() as cap:
            res = ipshell.run_cell("import clmagic\nclmagic.plot_sweep(df)")
        assert res.success and res.result is None
        assert "<Axes" not in cap.stdout and "<Figure" not in cap.stdout
        assert len(set(plt.get_fignums()) - before) == 1  # one figure, for matplotlib to show
    finally:
        for n in set(plt.get_fignums()) - before:
            plt.close(n)
        ipshell.user_ns.pop("df", None)
