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
#: :func:`normalising_keeps_meaning`), besides a ``\\r`` that is not part of ``\\r\\n``
#: and a splice at the very end: a splice followed by blanks before a line end. One pattern
#: for each splice, so that each starts with a literal the regex engine skips to (one pattern
#: for both scans the whole text at ~15 ns a character)
_BLANKED_BACKSLASH = re.compile(r"\\[ \t\f\v]+[\r\n]")
_BLANKED_TRIGRAPH = re.compile(r"\?\?/[ \t\f\v]+[\r\n]")
#: in the text reversed, a line end after the blanks that end the line before it, unless a
#: splice comes before them (``\\`` or ``??/``, reversed ``/??``, keeps its blanks). Matched
#: at line ends only (the pattern starts with one), each blank run once: linear
_CUT_REVERSED = re.compile(r"\n[ \t]+(?![ \t\\]|/\?\?)")
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
    if not normalising_keeps_meaning(text, options):
        return text, src
    normal = normalise_source(text)
    return (text, src) if normal is text else (normal, normal.encode("utf-8"))


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
    if "\r" in source and source.count("\r") != source.count("\r\n"):
        return False  # a lone \r (no two \r\n overlap: each counts one \r followed by \n)
    if source.rstrip(" \t\f\v").endswith(_SPLICES):
        return False  # a splice at the end, blanks after it or not
    if "\\" in source and _BLANKED_BACKSLASH.search(source) is not None:
        return False  # (a search for one character is a memchr: most texts skip the patterns)
    if "?" in source and _BLANKED_TRIGRAPH.search(source) is not None:
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
    A source that is already normal is returned as it is (the same object); so is one whose only
    blanks before a line end follow a splice.
    """
    if "\r" in source and "\r\n" in source:
        source = source.replace("\r\n", "\n")
    if not source.endswith("\n"):
        source += "\n"  # the last line ends like the others (and loses its blanks below)
    return _cut_lines(source)


def _cut_lines(source: str) -> str:
    """:func:`normalise_source`'s cut of a source that ends with ``\\n``: the blanks that end
    each line, unless a splice comes before them; ``source`` itself where there are none.

    Done on the text reversed, where the pattern starts with the line end: the regex engine
    skips to each line end and tries one match there (about 1 ns a character, all told, with
    the two reversals), where a search for the two characters ``" \\n"`` runs at about 1.5 ns a
    character and a pattern that starts with a blank is tried at every blank (~20 ns each)."""
    cut, count = _CUT_REVERSED.subn("\n", source[::-1])
    return cut[::-1] if count else source


#: the two cuts :func:`_cut_lines` replaced (both still named by tests/trip/test_saving.py)
_cut_some_lines = _strip_every_line = _cut_lines


#: from this size on, a source's normal form is checked on its bytes by numpy (10 µs for 40 KB,
#: against ~40 µs for the reversal and the line-end scan of :func:`_cut_lines`)
_LARGE = 8192


def _normal_bytes(src: bytes) -> bool:
    """Whether :func:`normalise_source` returns the text whose UTF-8 bytes are ``src`` as it
    is, judged safely (no byte of a multi-byte UTF-8 sequence is below 0x80, so a space, a
    tab, ``\\r`` or ``\\n`` byte is that character): it ends with ``\\n``, holds no ``\\r``,
    and no space or tab comes before a ``\\n``. ``False`` also where numpy is missing (the
    caller then looks as it always did)."""
    if not src.endswith(b"\n") or b"\r" in src:
        return False
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - pyopencl needs numpy
        return False
    data = np.frombuffer(src, np.uint8)
    before = data[:-1]  # each byte but the last, beside the one after it (no flatnonzero: 5 µs)
    return not bool((((before == 32) | (before == 9)) & (data[1:] == 10)).any())


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
