"""A source before it is keyed: checked (UTF-8, no NUL, not empty, bounded), normalised the way
IPython normalises a cell where that provably changes nothing the compiler sees, and its one-line
preview for the history."""

from __future__ import annotations

import re

from clmagic.errors import ClmagicError

__all__ = ["MAX_SOURCE", "check_source", "normalise_source", "normalising_keeps_meaning",
           "preview"]

#: what a line ends with when it is spliced to the next (then blanks, which it keeps)
_SPLICES = ("\\", "??/")

#: what makes :func:`normalise_source` change a program (see
#: :func:`normalising_keeps_meaning`): a ``\\r`` that is not part of ``\\r\\n``, a splice
#: (``\\`` or ``??/``) followed by blanks before a line end, or a splice at the very end
_CHANGES_MEANING = re.compile(r"\r(?!\n)|(?:\\|\?\?/)(?:[ \t\f\v]+[\r\n]|[ \t\f\v]*\Z)")
#: options under which a missing final newline is an error (``-pedantic-errors``) or can be
#: made one (``-Wnewline-eof``, ``-Weverything``, ``-pedantic`` with ``-Werror``)
_NEWLINE_MATTERS = re.compile(r"pedantic|newline-eof|everything", re.I)

#: the largest source accepted, in bytes (a bigger cell is almost surely a pasting accident)
MAX_SOURCE = 4 << 20


def check_source(source: str | bytes, options: str = "") -> tuple[str, bytes]:
    """The source as normalised text and as its UTF-8 bytes, or a one-line error saying why it
    cannot be compiled. The text is the one the driver receives and the key covers: normalised
    only where :func:`normalising_keeps_meaning` (under these ``options``), else as written."""
    if isinstance(source, bytes | bytearray | memoryview):
        src = bytes(source)
        try:
            text = src.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = src.count(b"\n", 0, exc.start) + 1
            raise ClmagicError(
                f"source is not UTF-8 text: byte 0x{src[exc.start]:02x} on line {line}"
            ) from None
    else:
        text = str(source)
        try:
            src = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            line = text.count("\n", 0, exc.start) + 1
            raise ClmagicError(
                f"source is not UTF-8 text: {text[exc.start]!r} on line {line}"
            ) from None
    if len(src) > MAX_SOURCE:
        raise ClmagicError(
            f"source is {len(src) / 2**20:.1f} MiB, over clmagic's {MAX_SOURCE >> 20} MiB limit "
            "(clmagic.key.source.MAX_SOURCE); nothing compiled"
        )
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise ClmagicError(f"source holds a NUL character on line {line}")
    if not text.strip():
        raise ClmagicError("empty source: nothing to compile")
    if len(src) >= _LARGE and _normal_bytes(src):
        return text, src  # already normal: nothing to change, so nothing to keep the meaning of
    normal = normalise_source(text)
    if normal is text or not normalising_keeps_meaning(text, options):
        return text, src
    return normal, normal.encode("utf-8")


def normalising_keeps_meaning(source: str, options: str = "") -> bool:
    """Whether the compiler reads :func:`normalise_source`'s text exactly as ``source``.

    Clang ends a line at ``\\n``, at ``\\r\\n`` and at a lone ``\\r``, and splices a
    backslash (``??/`` too: OpenCL C has trigraphs) followed by blanks, then any line end
    (``\\n\\r`` counts as one there). Normalising changes three things, each safe only
    where none of that is near:

    * ``\\r\\n`` becomes ``\\n``: the same line end, unless a lone ``\\r`` is about
      (``\\r\\r\\n`` is two line ends and would become one; ``\\`` + ``\\r`` +
      ``"  \\n"`` is a splice then a line end, and would become one splice);
    * blanks before a line end go: the preprocessor skips them (no token spans a line end),
      unless a splice comes before them (``\\`` + blanks + line end is a splice);
    * a final newline is added: the same unless the text ends in a splice (a backslash at the
      end is a stray token, with a newline after it a splice) or an option makes a missing
      newline an error (``-pedantic-errors``, ``-Wnewline-eof`` with ``-Werror``).

    Where this says no, the text is compiled and keyed as written.
    """
    if _CHANGES_MEANING.search(source) is not None:
        return False
    return source.endswith("\n") or _NEWLINE_MATTERS.search(options) is None


def normalise_source(source: str) -> str:
    """``\\r\\n`` as ``\\n``, trailing blanks (spaces and tabs) of each line stripped, a
    final newline.

    IPython does the same to a cell's blank lines, so the library and ``%%clkernel`` give the
    same key for the same text. Lines are split at ``\\n`` only (``str.splitlines`` would also
    split at form feed, vertical tab, ``\\x1c``–``\\x1e``, ``\\x85``, ``\\u2028`` and
    ``\\u2029``, which are not line ends to a C compiler: text after them in a ``//`` comment
    would become code). A lone ``\\r``, other whitespace and a byte-order mark are left as
    written, and a line that ends in a splice (``\\`` or ``??/``, then blanks: clang splices
    that too) keeps its blanks. That is not enough to keep the meaning everywhere (a lone
    ``\\r`` next to a ``\\r\\n``, ``\\`` + ``\\r`` + blanks + ``\\n``): the driver gets
    this text only where :func:`normalising_keeps_meaning` (:func:`check_source` decides), so it
    receives a program with the meaning the user wrote (pyopencl passes the source unchanged).
    A source that is already normal is returned as it is (the same object), found by a few
    scans rather than a split.
    """
    if _is_normal(source):
        return source
    if "\r\n" in source:
        source = source.replace("\r\n", "\n")
    if not source.endswith("\n"):
        source += "\n"  # the last line ends like the others (and loses its blanks below)
    if (source.count(" \n") + source.count("\t\n")) * 8 > source.count("\n"):
        return _strip_every_line(source)  # many lines to cut (generated code): split them all
    return _cut_some_lines(source)


def _cut_some_lines(source: str) -> str:
    """:func:`normalise_source`'s cut of a source that ends with ``\\n``, copying the text
    between the lines that end in blanks as it is (few such lines: hand-written code)."""
    out: list[str] = []  # the text in pieces: only the lines that end in blanks are cut
    start = 0  # the text not yet copied
    # the next line end after a space, after a tab (each line end is one or the other)
    space, tab = source.find(" \n"), source.find("\t\n")
    while space >= 0 or tab >= 0:
        newline = (min(space, tab) if space >= 0 and tab >= 0 else max(space, tab)) + 1
        if newline == space + 1:
            space = source.find(" \n", newline)
        else:
            tab = source.find("\t\n", newline)
        line = source.rfind("\n", 0, newline) + 1
        cut = line + len(source[line:newline].rstrip(" \t"))
        if not source.endswith(_SPLICES, line, cut):  # a splice keeps its blanks
            out.append(source[start:cut])
            start = newline
    out.append(source[start:])
    return "".join(out)


def _strip_every_line(source: str) -> str:
    """:func:`normalise_source`'s cut, line by line, of a source that ends with ``\\n``."""
    lines = source[:-1].split("\n")
    out = [line.rstrip(" \t") for line in lines]
    if "\\" in source or "??/" in source:  # a line that ends in a splice keeps its blanks
        out = [line if cut.endswith(_SPLICES) else cut for line, cut in zip(lines, out)]
    return "\n".join(out) + "\n"


def _is_normal(source: str) -> bool:
    """Whether :func:`normalise_source` would return ``source`` unchanged: ending with ``\\n``,
    no ``\\r\\n``, no space or tab before a ``\\n`` (lines are split at ``\\n`` alone and lose
    only spaces and tabs, so other characters, non-ASCII ones too, change nothing)."""
    return (source.endswith("\n") and " \n" not in source and "\t\n" not in source
            and "\r\n" not in source)


#: from this size on, a source's normal form is checked on its bytes by numpy (a search for a
#: two-character string such as " \n" runs at about 1 byte a ns in CPython: 110 µs for the
#: four searches over 40 KB, against 15 µs)
_LARGE = 8192


def _normal_bytes(src: bytes) -> bool:
    """:func:`_is_normal` of the text whose UTF-8 bytes are ``src`` (no byte of a multi-byte
    UTF-8 sequence is below 0x80, so a space, a tab, ``\r`` or ``\n`` byte is that
    character): it ends with ``\n``, holds no ``\r``, and no space or tab comes before a
    ``\n``. ``False`` also where numpy is missing (the caller then looks as it always did)."""
    if not src.endswith(b"\n") or b"\r" in src:
        return False
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - pyopencl needs numpy
        return False
    data = np.frombuffer(src, np.uint8)
    before = data[np.flatnonzero(data[1:] == 10)]  # the byte before each line end (a line
    return not bool(((before == 32) | (before == 9)).any())  # end at 0 has none)


def preview(source: str, width: int = 60) -> str:
    """The first line of code (not a comment or directive), cut to ``width``; reads only as
    far as that line (a source is normalised: its lines end with ``\\n`` alone)."""
    start, end = 0, len(source)
    while start < end:
        stop = source.find("\n", start)
        stop = end if stop < 0 else stop
        line = source[start:stop].strip()
        if line and not line.startswith(("//", "/*", "*", "#")):
            return line[:width]
        start = stop + 1
    return source.strip()[:width]
