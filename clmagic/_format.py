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
           "device_label", "map_log_lines", "short_paths", "middle_cut", "end_cut",
           "tidy_log", "wrapped"]


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


#: what tells no device apart in a name: trademark signs, a trailing "Processor" or "CPU"
_NAME_NOISE = re.compile(r"\s*\((?:R|TM|C)\)|\s+(?:Processor|CPU)$", re.IGNORECASE)
_VERSION = re.compile(r"\d+(?:\.\d+)?")


def device_label(platform_name: str, device_name: str, driver_version: str = "") -> str:
    """A device's one short name everywhere (the result line, every table, the panel's device
    list, the command line, the history): ``POCL 3.1 pthread-skylake-avx512-Intel Xeon``,
    ``Oclgrind Simulator``, ``NVIDIA H200``. The platform only where the device name does not
    already say it; POCL's version (from ``driver_version``) because two POCLs often sit on one
    machine, a distribution's and the pip wheel's, and name their CPU alike; trademark signs
    and a trailing "Processor" left out (they tell no device apart)."""
    device = " ".join(_NAME_NOISE.sub("", device_name).split()) or device_name
    if "portable computing language" in platform_name.lower():
        version = _VERSION.match(driver_version.strip())
        return f"POCL {version.group()} {device}" if version else f"POCL {device}"
    plat = " ".join(_NAME_NOISE.sub("", platform_name).split())
    first = plat.split()[0].lower() if plat.split() else ""
    return device if not plat or first in device.lower() else f"{plat} {device}"


def fmt_bytes(n: int) -> str:
    """``512 B``, ``12.3 KiB``, ``4.6 MiB``, ``1 GiB``: powers of 1024 everywhere (the size
    limit's default is 1 GiB, and a limit read in one unit and shown in another reads as two
    numbers), one decimal, none where it is zero."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    text = f"{value:.1f}" if value < 100 else f"{value:.0f}"
    return f"{text.removesuffix('.0')} {unit}"


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


# -- long paths in a table cell ------------------------------------------------------------------

#: an absolute path: at the start, after a space or ``=``, or glued to ``-I`` (``-I/usr/include``)
_PATH = re.compile(r"(?:^|(?<=[\s=])|(?<=-I))/[^\s\"',;]+")
_PACKAGES = re.compile(r"/(?:site|dist)-packages/([^/]+)(/.*)?$")
#: a path longer than this is cut in its middle, after the named prefixes
PATH_WIDTH = 32


def middle_cut(text: str, width: int) -> str:
    """``text`` at most ``width`` characters, its middle replaced by ``…`` (the start says where,
    the end says what: ``/opt/…/include/cl``), unchanged when it fits."""
    if len(text) <= width:
        return text
    if width < 2:
        return text[:width]
    head = (width - 1) // 3
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def end_cut(text: str, width: int) -> str:
    """``text`` at most ``width`` characters, cut at its end with ``…`` (for text whose start
    says what happened: a note, an error), unchanged when it fits."""
    return text if len(text) <= width else text[:width - 1].rstrip() + "…"


def wrapped(head: str, parts: list[str], width: int | None, indent: int = 2,
            sep: str = " · ") -> list[str]:
    """``head`` and ``parts`` joined by ``sep`` on one line, or, where that passes ``width``,
    on as many lines as it takes, each line after the first indented by ``indent`` spaces and
    broken only between parts (a terminal breaks a line anywhere: in a path, in a number). A
    part longer than a line stays whole on its own (a path is copied, not read across lines);
    ``None``: no width, one line (a pipe, ``grep``)."""
    lines = [head]
    for part in parts:
        if not part:
            continue
        joined = f"{lines[-1]}{sep}{part}" if lines[-1].strip() else lines[-1] + part
        if width is None or len(joined) <= width or not lines[-1].strip():
            lines[-1] = joined
        else:
            lines.append(" " * indent + part)
    return lines


def _short_path(path: str, home: str) -> str:
    found = _PACKAGES.search(path)
    if found:  # an installed package's folder: named by its package
        path = f"<{found[1]}>{found[2] or ''}"
    elif home and home != "/" and (path == home or path.startswith(home + "/")):
        path = "~" + path[len(home):]
    return middle_cut(path, PATH_WIDTH)


def short_paths(text: str) -> str:
    """``text`` (build options, a note) with each absolute path shortened for a table:
    an installed package's folder by its name (``-I /…/site-packages/pyopencl/cl`` →
    ``-I <pyopencl>/cl``), the home folder as ``~``, anything still long cut in its middle.
    Only for showing: the data keeps the full value, and the table shows it in a tooltip."""
    if "/" not in text:
        return text
    import os

    home = os.path.expanduser("~").rstrip("/")
    return _PATH.sub(lambda m: _short_path(m[0], home), text)


# -- a build log as shown ------------------------------------------------------------------------

_HEAD = re.compile(r"^(?:(?:fatal error|error|warning|note|remark)\s*:|\S+:\d+:(?:\d+:)?\s)",
                   re.IGNORECASE)
_AT = re.compile(r"\bline (?P<line>\d+)(?::(?P<col>\d+))?:")
#: the driver's own tail lines, said by clmagic already: POCL's "Device X failed to build the
#: program" (the error's first line says it), clang's "2 warnings generated." (the line counts)
_SAID = re.compile(r"^(?:Device .+ failed to build the program\.?|\d+ (?:warnings?|errors?)"
                   r"(?: and \d+ (?:warnings?|errors?))? generated\.)$")
_CARET = re.compile(r"^\s*(?:\d+\s*\|\s*)?[\s~]*\^[\s~]*$")


def _messages(lines: list[str]) -> list[list[str]]:
    """The log cut into messages: a line that opens one (``error: …``, ``x.h:3:1: …``) and the
    lines under it (a source echo, a caret, notes a driver indents)."""
    out: list[list[str]] = []
    for line in lines:
        if not out or _HEAD.match(line.lstrip()):
            out.append([line])
        else:
            out[-1].append(line)
    return out


def _code_under(head: str, source_lines: list[str], line_offset: int) -> list[str]:
    """The cell's line a message points at, and a caret under its column (gcc's gutter:
    `` 4 |     int i = f(0)`` / ``   |                 ^``); nothing when it points elsewhere."""
    at = _AT.search(head)
    if at is None:
        return []
    n = int(at["line"])
    index = n - line_offset - 1
    if not 0 <= index < len(source_lines):
        return []
    code = source_lines[index].rstrip("\r\n")
    gutter = f"{n:>4} | "
    shown = [gutter + code]
    if at["col"]:  # the driver's column counts bytes from 1; tabs stay tabs so the caret aligns
        before = code.encode("utf-8")[:max(int(at["col"]) - 1, 0)].decode("utf-8", "ignore")
        pad = "".join("\t" if ch == "\t" else " " for ch in before)
        shown.append(" " * (len(gutter) - 2) + "| " + pad + "^")
    return shown


def tidy_log(log: str, line_offset: int = 0, source: str | None = None) -> str:
    """A driver's build log as a person reads it: locations as the cell's line numbers
    (:func:`map_log_lines`), each message once (POCL reports a ``#warning`` twice), the
    driver's tail lines that repeat what clmagic says dropped, and, given the ``source``, the
    cell's line under each message that points into it, with a caret at the column (as clang
    and ``%%cython`` show them), unless the driver showed it already."""
    mapped = map_log_lines(log.strip(), line_offset)
    lines = [line for line in mapped.splitlines() if not _SAID.match(line.strip())]
    if not any(line.strip() for line in lines):
        return mapped  # nothing but the tail line: keep what the driver said
    source_lines = source.splitlines() if source else []
    seen: set[tuple[str, ...]] = set()
    out: list[str] = []
    for message in _messages(lines):
        key = tuple(line.rstrip() for line in message)
        if key in seen:
            continue
        seen.add(key)
        out.append(message[0])
        if source_lines and not any(_CARET.match(line) for line in message[1:]):
            out += _code_under(message[0], source_lines, line_offset)
        out += message[1:]
    return "\n".join(out).strip("\n")
