"""The session history as a matplotlib plot (matplotlib is imported here only)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from clmagic._format import count_of, fmt_duration
from clmagic.outcome import Outcome
from clmagic.process.session import or_default
from clmagic.show.line import COLOURS
from clmagic.trip.records import Record, from_origin

if TYPE_CHECKING:
    from clmagic.trip.compiler import Compiler

__all__ = ["plot_history", "theme_neutral", "NEUTRAL"]


def _name(kernels: tuple[str, ...] | list[str]) -> str:
    """A bar's label: the first kernel's name, ``+N`` for the others, at most 16 characters."""
    if not kernels:
        return "(none)"
    first = kernels[0] if len(kernels[0]) <= 14 else kernels[0][:13] + "…"
    return first + (f" +{len(kernels) - 1}" if len(kernels) > 1 else "")


#: the colour of text, ticks and lines that reads on JupyterLab's light and dark themes alike
NEUTRAL = "#8a8a8a"


def theme_neutral(ax: Any) -> None:
    """Make ``ax``'s figure read in a light and a dark theme: no background (the page's shows
    through, as in JupyterLab's dark theme, where a white figure glares), text, ticks, axes
    and legend in a grey that reads on both."""
    fig = ax.figure
    fig.patch.set_alpha(0.0)
    ax.set_facecolor("none")
    ax.tick_params(colors=NEUTRAL, which="both")
    for spine in ax.spines.values():
        spine.set_color(NEUTRAL)
    for text in (ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts):
        text.set_color(NEUTRAL)
    from matplotlib.colors import to_hex

    for line in ax.lines:  # black marks (error bars' caps) vanish on a dark page
        if to_hex(line.get_markeredgecolor()) == "#000000":
            line.set_markeredgecolor(NEUTRAL)
    for artist in ax.collections:  # error bars' stems
        colours = artist.get_edgecolor()
        if len(colours) and all(to_hex(c) == "#000000" for c in colours):
            artist.set_color(NEUTRAL)
    legend = ax.get_legend()
    if legend is not None:
        for text in legend.get_texts():
            text.set_color(NEUTRAL)


def _trips(compiler: Compiler | None, fingerprint: str | None, origin: str | None
           ) -> list[Record]:
    """The session's trips on the device ``fingerprint`` (``None``: every device), of
    ``origin``."""
    return [r for r in or_default(compiler).history.records
            if (fingerprint is None or r.fingerprint == fingerprint)
            and from_origin(r.origin, origin)]


def plot_history(*, compiler: Compiler | None = None, ax: Any = None,
                 fingerprint: str | None = None, origin: str | None = None) -> Any:
    """Plot each build trip of this session: a bar of the time it took, coloured by outcome
    (MISS red, HIT green, MEMORY blue, ...), named by its kernels, and a grey tick at the
    original driver build time, so the gap between tick and bar is the time a hit saved. Log
    scale; the legend sits beside the bars, not on them.

    ``fingerprint`` and ``origin``: only the trips on that device, of that origin (the cache
    panel's scope). Draws on ``ax`` when given, else on a new figure; returns the figure. A new
    figure is not left open in pyplot, so a notebook shows it once (as the cell's value), not
    twice. It has no background and grey text (:func:`theme_neutral`): it reads in a dark
    theme too.
    """
    records = _trips(compiler, fingerprint, origin)
    if ax is None:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 3), layout="constrained")
        plt.close(fig)  # displayed as the returned value only
    fig = ax.figure
    if not records:
        ax.text(0.5, 0.5, "no builds yet" + (" on this device" if fingerprint else ""),
                ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        theme_neutral(ax)
        return fig
    x = list(range(1, len(records) + 1))
    taken = [max(r.ms, 1e-3) for r in records]
    ax.bar(x, taken, color=[COLOURS.get(r.outcome, "#555") for r in records], width=0.7)
    ax.scatter(x, [max(r.build_ms, 1e-3) for r in records], marker="_", s=300, color=NEUTRAL,
               linewidths=2, label="driver build ms", zorder=3)
    from matplotlib.patches import Patch

    seen = [o for o in Outcome if any(r.outcome == o for r in records)]
    handles = [Patch(color=COLOURS[o], label=f"{o} ms taken") for o in seen]
    ax.legend(handles=[*handles, *ax.get_legend_handles_labels()[0]], fontsize=8,
              loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)
    ax.set_yscale("log")
    built = [max(r.build_ms, 1e-3) for r in records]
    ax.set_ylim(10 ** math.floor(math.log10(min(*taken, *built))),  # whole decades
                10 ** math.ceil(math.log10(max(*taken, *built)) + 1e-9))
    ax.set_xlim(0.4, max(len(x), 4) + 0.6)  # a lone bar is a bar, not the whole plot
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    ax.yaxis.set_major_locator(LogLocator(base=10))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.set_ylabel("ms (log scale)")
    shown = x if len(x) <= 30 else x[:: max(len(x) // 15, 1)]
    ax.set_xticks(shown, [_name(records[i - 1].kernels) for i in shown], rotation=30,
                  ha="right", fontsize=8)
    ax.set_xlabel("build trips of this session, in order (named by their first kernel)",
                  fontsize=8)
    saved = sum(r.saved_ms for r in records)
    # trips, not builds: HITs and refused builds are bars too
    where = f" on {records[0].device.label}" if fingerprint else ""
    ax.set_title(f"clmagic: {count_of(len(records), 'build trip')}{where}, "
                 f"{fmt_duration(saved)} saved", fontsize=10)
    theme_neutral(ax)
    return fig
