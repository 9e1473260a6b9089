"""Every file the compiler may read for a source and its options, for the key — or "cannot tell".

The rule is *fail safe, never fail stale*: the key covers a superset of the files a driver can
read, and where clmagic cannot tell which files those are (``#include MACRO``, an option it does
not know), :class:`Unkeyable` says why and the build bypasses the cache.

**The source.** The preprocessor's own translation phases are followed before looking for
directives: trigraphs (clang enables them for OpenCL C: ``??=include`` is an include on POCL and
Oclgrind), line splices (a backslash, optional blanks, then ``\\n``, ``\\r\\n`` or ``\\r``: so
``#inc\\`` + newline + ``lude`` is an include), comments (so ``# /*x*/ include`` is one), and the
digraph ``%:``. ``#include``, ``#include_next``, ``#import``, ``#embed`` and ``__has_include`` /
``__has_include_next`` / ``__has_embed`` name files; the text is also scanned without the
trigraph and comment phases, and every file named either way is covered (an include inside a
comment or ``#if 0`` costs at most a MISS). A directive whose operand is not a literal
``"x"`` or ``<x>`` (a computed include) is "cannot tell".

**The options** (:func:`option_inputs`): ``-I``, ``-isystem``, ``-iquote``, ``-idirafter`` add
folders, ``-include`` / ``--include`` / ``-imacros`` add files (Oclgrind accepts them all; POCL
refuses them). Options known not to read files (``-D``, ``-U``, ``-cl-…``, ``-W…``, ``-w``,
``-g``, ``-O…``, plain ``-f…`` and ``-m…`` flags) pass; anything else (``-I=``, ``-Xclang``,
``@file``, ``-mllvm``, ``-f…=VALUE``, a bare word…) is "cannot tell". Flags a driver adds from
its environment (``POCL_EXTRA_BUILD_FLAGS``, ``OCLGRIND_BUILD_OPTIONS``) are read the same way
and go into the key (:func:`driver_flags`).

**The search.** Drivers do not agree on the search order (POCL looks in the working directory
first even for ``<x.h>``; Oclgrind only for ``"x.h"``), so for every file named, *every* existing
candidate is taken, in a fixed order: the folder of the including file (as named and as resolved),
each include folder of the options in order (relative ones against the working directory), the
working directory. Paths are not normalised before opening (``link/../x.h`` is what the kernel
resolves it to), each file is read once, recursively. A name found nowhere is left to the
compiler (whose error is shown); a name that exists but is not a regular file is "cannot tell".
"""

from __future__ import annotations

import errno
import os
import re
import threading
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from clmagic._memo import remember
from clmagic.errors import ClmagicError
from clmagic.key.stamps import DIR, Headers, identity
from clmagic.opencl.driver_env import ONCE_PER_PROCESS, changed_after_read
from clmagic.store._fs import TooLarge, read_regular


class Unkeyable(ClmagicError):
    """clmagic cannot tell which files the build reads: it must bypass the cache."""


__all__ = ["find_headers", "strip_comments", "includes_of", "option_inputs", "driver_flags",
           "working_folder",
           "Headers", "headers_changed", "MAX_HEADERS", "MAX_HEADER_BYTES", "Unkeyable",
           "DRIVER_FLAG_VARS"]

MAX_HEADERS = 4096
MAX_HEADER_BYTES = 64 << 20

#: environment variables whose value a driver adds to every build's options
DRIVER_FLAG_VARS = ("POCL_EXTRA_BUILD_FLAGS", "OCLGRIND_BUILD_OPTIONS")

_TRIGRAPHS = {"=": "#", "/": "\\", "'": "^", "(": "[", ")": "]", "!": "|", "<": "{", ">": "}",
              "-": "~"}
_TRIGRAPH = re.compile(r"\?\?([=/'()!<>-])")
_SPLICE = re.compile(r"\\[ \t\f\v]*(?:\r\n|\n|\r)")
_NEWLINE = re.compile(r"\r\n?")
_TOKENS = re.compile(
    r'//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:\\.|[^"\\\n])*"?|\'(?:\\.|[^\'\\\n])*\'?', re.DOTALL
)
_BLANK = r"[ \t\f\v]*"
_OPERAND = r'(?:"([^"\n]*)"|<([^>\n]*)>)?(.*)'
_DIRECTIVE = re.compile(
    rf"^{_BLANK}(?:#|%:){_BLANK}(include_next|include|import|embed)\b{_BLANK}{_OPERAND}$",
    re.MULTILINE)
_HAS = re.compile(rf"\b(__has_include_next|__has_include|__has_embed){_BLANK}\({_BLANK}"
                  rf'(?:"([^"\n]*)"|<([^>\n]*)>)?')
_LITERAL = re.compile(r'(?:#|%:|\?\?=)\s*(?:include_next|include|import|embed)\s*'
                      r'(?:"([^"\n]*)"|<([^>\n]*)>)'
                      r'|__has_(?:include_next|include|embed)\s*\(\s*(?:"([^"\n]*)"|<([^>\n]*)>)')
# every form that names a file holds one of these words once lines are spliced
_WORDS = ("include", "import", "embed")
_MARKS = ("#", "%:", "??=", "*/")


def _phases(text: str, trigraphs: bool) -> str:
    """Translation phases 1–2: trigraphs (if on), newlines as ``\\n``, line splices removed."""
    if trigraphs:
        text = _TRIGRAPH.sub(lambda m: _TRIGRAPHS[m.group(1)], text)
    if "\\" in text:
        text = _SPLICE.sub("", text)
    return _NEWLINE.sub("\n", text) if "\r" in text else text


def strip_comments(text: str) -> str:
    """``text`` after line splicing with ``//`` and ``/* */`` comments blanked (newlines kept,
    so lines stay lines); string and character literals are left alone."""
    return _blank_comments(_phases(text, trigraphs=False))


def _blank_comments(text: str) -> str:
    """Comments of already spliced text blanked (splicing twice would join what clang does
    not)."""

    def repl(m: re.Match[str]) -> str:
        s = m.group(0)
        if s.startswith("/*"):
            return " " + "\n" * s.count("\n")
        if s.startswith("//"):
            return " "
        return s

    return _TOKENS.sub(repl, text)


class _Named(NamedTuple):
    spellings: list[str]  # '"x.h"' or '<x.h>'
    computed: str  # the first directive whose operand is not a literal, else ""


def _names_nothing(text: str) -> bool:
    """Whether ``text`` surely names no file, by substring searches (no regex: most sources end
    here, a licence's "included in all copies" too). Every form that names a file holds a word
    ``include``, ``import`` or ``embed`` once lines are spliced (with and without trigraphs:
    ``??/`` splices) and has, before that word on its line, a ``#``, ``%:`` or ``??=`` — or a
    ``*/`` (a comment from an earlier line may sit between the ``#`` and the word), or
    ``__has_`` right before it, or only blanks (the ``#`` may end an earlier line: the scan
    reads ``#`` and the word across blank lines too). A word after anything else is prose or
    code, never a directive's."""
    forms = [text]
    if "\\" in text or "??/" in text:
        forms = [_phases(text, trigraphs=t) for t in ([False, True] if "??/" in text else [False])]
    for form in forms:
        for word in _WORDS:
            at = form.find(word)
            while at >= 0:
                line = form[form.rfind("\n", 0, at) + 1:at]
                if (not line.strip() or line.endswith("__has_")
                        or any(mark in line for mark in _MARKS)):
                    return False
                at = form.find(word, at + len(word))
    return True


#: texts scanned in full (headers met again and again)
_SCANNED: OrderedDict[str, _Named] = OrderedDict()
_SCANNED_MAX = 128
_SCANNED_LOCK = threading.Lock()


def _scan(text: str) -> _Named:
    if len(text) < 2048:  # cheaper to look than to remember
        return _Named([], "") if _names_nothing(text) else _scan_all(text)
    named = _SCANNED.get(text)  # a header met again (pyopencl's, in every generated kernel)
    if named is None:
        named = _Named([], "") if _names_nothing(text) else _scan_all(text)
        if len(text) <= 256 << 10:
            with _SCANNED_LOCK:
                remember(_SCANNED, text, named, _SCANNED_MAX)
    return _Named(list(named.spellings), named.computed)


def _scan_all(text: str) -> _Named:
    """Every name ``text`` may include, by the preprocessor's phases (see :func:`_scan`)."""
    names: list[str] = []
    computed = ""
    variants = [False, True] if "??" in text else [False]
    for trigraphs in variants:
        spliced = _phases(text, trigraphs)
        stripped = _blank_comments(spliced)
        for m in _DIRECTIVE.finditer(stripped):
            q, a, rest = m.group(2), m.group(3), m.group(4)
            if q is None and a is None:
                computed = computed or f"#{m.group(1)} {rest.strip()[:40]}"
            else:
                names.append(f'"{q}"' if q is not None else f"<{a}>")
        for m in _HAS.finditer(stripped):
            q, a = m.group(2), m.group(3)
            if q is None and a is None:
                computed = computed or f"{m.group(1)}(…)"
            else:
                names.append(f'"{q}"' if q is not None else f"<{a}>")
        for m in _LITERAL.finditer(spliced):  # also where the comment phase may disagree
            q = m.group(1) if m.group(1) is not None else m.group(3)
            a = m.group(2) if m.group(2) is not None else m.group(4)
            names.append(f'"{q}"' if q is not None else f"<{a}>")
    return _Named(list(dict.fromkeys(names)), computed)


def includes_of(text: str) -> list[str]:
    """The file names ``text`` may include, in order: ``"x.h"`` or ``<x.h>`` (raises
    :class:`Unkeyable` for a computed include)."""
    named = _scan(text)
    if named.computed:
        raise Unkeyable(f"a computed include ({named.computed}): cannot tell which file")
    return named.spellings


# -- options ---------------------------------------------------------------------------------

_DIR_OPTS = ("-isystem", "-iquote", "-idirafter", "-I")
_FILE_OPTS = ("--include", "-include", "--imacros", "-imacros")
_SAFE = re.compile(r"-(?:D|U|cl-|nv-|g|O|w$|W(?![pal],)|f(?!.*(?:=|module|plugin))|"
                   r"m(?!llvm))")


class OptionInputs(NamedTuple):
    dirs: list[str]
    files: list[str]


def option_inputs(tokens: Sequence[str]) -> OptionInputs:
    """The include folders and forced includes of options as the driver splits them, or
    :class:`Unkeyable` for an option that may read files clmagic does not know."""
    dirs: list[str] = []
    files: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok.startswith("-I="):
            raise Unkeyable(f"option {tok!r} (a folder under the sysroot): cannot tell which "
                            "files it makes the compiler read")
        if tok in ("-D", "-U"):  # the name follows (pyopencl writes "-D NAME")
            i += 1
            continue
        prefix = next((p for p in (*_DIR_OPTS, *_FILE_OPTS) if tok.startswith(p)), None)
        if prefix is not None:
            value = tok[len(prefix):]
            if value.startswith("=") and prefix.startswith("--"):
                value = value[1:]
            if not value:
                if i >= len(tokens):
                    continue  # the driver refuses it; nothing is read
                value = tokens[i]
                i += 1
            (dirs if prefix in _DIR_OPTS else files).append(value)
        elif not _SAFE.match(tok):
            raise Unkeyable(f"option {tok[:60]!r}: cannot tell which files it makes the "
                            "compiler read")
    return OptionInputs(dirs, files)


def working_folder() -> str:
    """The working folder the compiler searches, or ``""`` where it was removed (``os.rmdir``
    of the current folder): a removed folder holds no files, so its relative paths find none,
    for the drivers as for the search; ``""`` is keyed as such and the build goes on."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        return ""


def driver_flags() -> dict[str, str]:
    """The build flags drivers add from the environment (``{NAME: value}`` of those set), for
    the key and for :func:`find_headers`. Raises :class:`Unkeyable` where the value now may not
    be the one the driver uses (POCL keeps the first value it read:
    :func:`clmagic.opencl.driver_env.changed_after_read`; Oclgrind reads it at each build)."""
    flags = {}
    for name in DRIVER_FLAG_VARS:
        value = os.environ.get(name, "")
        why = changed_after_read(name) if name in ONCE_PER_PROCESS else ""
        if why:
            raise Unkeyable(why)
        if value:
            flags[name] = value
    return flags


# -- the search ------------------------------------------------------------------------------

def _read(path: str, found: Headers
          ) -> tuple[bytes, tuple[str, int, int, int, int, int]] | None:
    """A candidate header's bytes and identity (the one safe read of
    :func:`~clmagic.store._fs.read_regular`: a FIFO never waited on, the read bounded), or
    ``None`` where the compiler's search finds nothing: missing, or a folder (clang skips a
    folder and looks on); anything else it cannot read is "cannot tell". What it finds is
    noted in ``found`` (:meth:`~clmagic.key.stamps.Headers.saw`)."""
    try:
        data, st = read_regular(path, MAX_HEADER_BYTES, follow=True)  # the compiler follows links
    except FileNotFoundError:
        found.saw(path, None)
        return None
    except TooLarge:
        raise Unkeyable(f"the includes go past what a key can cover ({MAX_HEADER_BYTES >> 20} "
                        f"MiB a header at most; {path})") from None
    except OSError as exc:
        if exc.errno == errno.EISDIR or os.path.isdir(path) or not os.path.lexists(path):
            found.saw(path, DIR if os.path.isdir(path) else None)
            return None  # a folder is skipped by the compiler's search too
        raise Unkeyable(f"{path} cannot be read ({exc.strerror}): cannot tell what the "
                        "compiler reads there") from None
    found.saw(path, identity(st))
    return data, (path, *identity(st))


def _inputs_of(options: str) -> OptionInputs:
    """:func:`option_inputs` of the options string the driver receives, split on blanks and,
    where quotes or backslashes make it differ, as a shell splits it too (drivers honour double
    quotes): the folders and files of both readings."""
    extra = option_inputs(options.split())
    if '"' in options or "\\" in options:
        import shlex

        try:
            quoted = option_inputs(shlex.split(options))
        except ValueError:
            raise Unkeyable("unbalanced quotes in the options: cannot tell how the driver "
                            "splits them") from None
        extra = OptionInputs(extra.dirs + quoted.dirs, extra.files + quoted.files)
    return extra


def find_headers(
    source: str | bytes,
    include_dirs: Iterable[str] = (),
    cwd: str | None = None,
    *,
    options: str = "",
) -> Headers:
    """Every file ``source`` built with ``options`` (the string the driver receives, with
    :func:`driver_flags` values) could read, as ``(name, contents)`` in the order met.

    ``name`` is the spelling and the search slot (``"x.h" @.`` for the including file's folder,
    ``"x.h" @-Iinc`` for an include folder as written, ``"x.h" @cwd``), so the key does not
    depend on where the project lives, only on what the compiler can read. ``include_dirs``
    adds folders (older callers). Raises :class:`Unkeyable` where clmagic cannot tell.
    """
    cwd = working_folder() if cwd is None else cwd
    extra = _inputs_of(options)
    dirs = list(dict.fromkeys([*include_dirs, *extra.dirs]))
    slots = [(f"-I{d}", os.path.join(cwd, d)) for d in dirs]
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    found = Headers()
    found.found_with = (text, tuple(include_dirs), cwd, options)
    seen: set[tuple[int, int]] = set()  # files met, by device and inode (links, ../ included)
    names = includes_of(text)
    found.static = not names and not extra.files
    todo: deque[tuple[list[str], list[str]]] = deque()
    if extra.files:  # -include F: as if the main file began with #include "F"
        todo.append(([f'"{f}"' for f in extra.files], [cwd]))
    todo.append((names, [cwd]))
    while todo:
        spellings, folders = todo.popleft()
        for spelling in spellings:
            rel = spelling[1:-1]
            here = [(".", f) for f in folders]
            for slot, base in [*here, *slots, ("cwd", cwd)]:
                path = os.path.join(base, rel)
                got = _read(path, found)
                if got is None:
                    continue
                data, stamp = got
                if stamp[1:3] in seen:
                    continue
                if len(data) > MAX_HEADER_BYTES or len(found) >= MAX_HEADERS:
                    # a key that left part of the headers out could serve a stale binary
                    raise Unkeyable(
                        f"the includes go past what a key can cover ({MAX_HEADERS} headers of "
                        f"{MAX_HEADER_BYTES >> 20} MiB at most; {rel})"
                    )
                seen.add(stamp[1:3])
                found.append((f"{spelling} @{slot}", data))
                found.stamps.append(stamp)
                inner = includes_of(data.decode("utf-8", "replace"))
                if inner:
                    real = os.path.realpath(path)
                    found.saw_realpath(path, real)
                    parents = list(dict.fromkeys([os.path.dirname(path), os.path.dirname(real)]))
                    todo.append((inner, parents))
    return found


def headers_changed(headers: Headers, during: str = "the build") -> str:
    """Why the files ``headers`` covered are not, now, what was read (a header edited,
    created or removed while the driver built, or ``during`` something else), or "" when they
    are the same."""
    if headers.static or headers.found_with is None:
        return ""
    text, dirs, cwd, options = headers.found_with
    try:
        again = find_headers(text, dirs, cwd, options=options)
    except Unkeyable as exc:
        return f"the included files changed during {during} ({exc})"
    if list(again) != list(headers) or again.stamps != headers.stamps:
        # the same names, compared in order; not strict: lists of other lengths (a name listed
        # twice) that agree as far as both go name "a header"
        names = {n for n, _ in again} ^ {n for n, _ in headers} or {
            n for (n, d), (m, e) in zip(again, headers, strict=False) if d != e} or {"a header"}
        return f"{sorted(names)[0]} changed during {during}"
    return ""
