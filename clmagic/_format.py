"""The plain formats every layer shares: sizes, durations, moments, short keys, counts, a device's
one short name, and a build log's locations as the cell's line numbers.

They live on the ground floor because layers below the renderings need them too (a device's
label, a store's size in a message, a failed build's log in :class:`clmagic.errors.BuildError`),
and a data layer that imported them from ``show/`` would import upward. They are words only, no
HTML (the HTML helpers stay in ``show/``), and import nothing of clmagic.
"""

from __future__ import annotations

import re
import time

__all__ = ["fmt_bytes", "fmt_duration", "fmt_ms", "fmt_time", "short_key", "count_of",
           "device_label", "map_log_lines"]


def fmt_ms(ms: float) -> str:
    """Every duration in a table or a line: ``0.05 ms``, ``5.72 ms``, ``512.3 ms`` (one style)."""
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms"


def fmt_time(t: float) -> str:
    """A moment to the second, in UTC: ``2026-12-01 16:02:11 UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def short_key(key: str) -> str:
    """The first 12 hex digits of a key, enough to tell entries apart and to clear one."""
    return key[:12] + "…" if len(key) > 12 else key


def count_of(n: int, word: str) -> str:
    """``1 entry``, ``2 entries``, ``0 warnings``."""
    if n == 1:
        return f"1 {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


def device_label(platform_name: str, device_name: str) -> str:
    """A device's one short name everywhere: ``POCL pthread-AMD EPYC``, ``Oclgrind Simulator``,
    ``NVIDIA H200`` (the platform only where the device name does not already say it)."""
    plat = "POCL" if "portable computing language" in platform_name.lower() else platform_name
    return device_name if plat.lower() in device_name.lower() else f"{plat} {device_name}"


def fmt_bytes(n: int) -> str:
    """``512 B``, ``12.3 KB``, ``4.56 MB`` (powers of 1000)."""
    if n < 1000:
        return f"{n} B"
    if n < 1_000_000:
        return f"{n / 1000:.1f} KB"
    if n < 1_000_000_000:
        return f"{n / 1_000_000:.2f} MB"
    return f"{n / 1_000_000_000:.2f} GB"


def fmt_duration(ms: float) -> str:
    """``850 ms``, ``12.4 s``, ``3.2 min``."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


_LOC = re.compile(
    r"(?:^|(?<=\s))(?P<file>[^\s:]+):(?P<line>\d+):(?:(?P<col>\d+):)?", re.MULTILINE
)


def _is_main_source(name: str) -> bool:
    """The driver's name for the program source: a temp ``*.cl`` file, ``input.cl``,
    ``<kernel>``/``<source>`` (NVIDIA), as opposed to an included header."""
    return name.endswith(".cl") or (name.startswith("<") and name.endswith(">"))


def map_log_lines(log: str, line_offset: int = 0) -> str:
    """Rewrite locations of the program source in a driver build log (``/tmp/x.cl:3:12:``,
    ``<kernel>:3:12:``) to ``line N:12:``, shifted by ``line_offset`` so they match the notebook
    cell's own numbering. Locations in included headers keep their file name."""

    def repl(m: re.Match[str]) -> str:
        if not _is_main_source(m["file"]):
            return m[0]
        col = f":{m['col']}" if m["col"] else ""
        return f"line {int(m['line']) + line_offset}{col}:"

    return _LOC.sub(repl, log)
