"""Builds a cached binary cannot stand for: sources that read the clock, and what a helper
process may build again in the user's stead.

**The clock.** ``__TIME__``, ``__DATE__`` and ``__TIMESTAMP__`` expand to the time of the build
(``__TIMESTAMP__``: of the file the driver writes the source to, new at every build), so a
binary served from the cache holds another build's time. Like ccache, clmagic builds such a
source every time and stores nothing (:func:`clock_reason`: the build bypasses the cache, and
its result line says why). The names are looked for where the preprocessor could find them:
in the source, in every header it reaches and in the options (``-DT=__TIME__``); after line
splices (``__TI\\`` + newline + ``ME__``, with blanks or ``\\r`` line ends, or ``??/``) as well
as before; and as a paste (``CAT(__TI, ME__)`` with ``#define CAT(a, b) a##b``) wherever the
text can paste tokens and its identifiers can spell a name. A mention in a comment or string
counts too: that costs a cached build at most, never a stale one.

**Building again.** On POCL a MISS's binary is read out by a helper process that builds the
same text again (:mod:`clmagic.opencl.readout`). That binary stands for the user's only where
the build is a function of the text, the options and the device alone: clang and LLVM are
deterministic, so two builds of one input make one binary; :func:`rebuilt_alike` says where the
input is surely the same (no file named, so nothing to be edited between the two builds; or
every file read known to the key and re-checked by
:func:`~clmagic.key.includes.headers_changed` once the helper's build is done; no clock, which
the bypass above already keeps away from any save; no file name of the driver's: POCL compiles
a temporary file whose name is new at every build, so ``__FILE__`` differs between two builds;
no driver flags from the environment, which the helper may have read at another time). Else
the binary is read out of the user's own program, in-process.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from collections.abc import Collection, Iterable
from typing import NamedTuple

from clmagic._memo import remember
from clmagic.key.includes import DRIVER_FLAG_VARS, Headers, Unkeyable, includes_of, option_inputs

__all__ = ["CLOCK", "clock_reason", "rebuilt_alike", "spells", "pastes"]

#: the names whose value is the time of the build
CLOCK = ("__TIME__", "__DATE__", "__TIMESTAMP__")
#: the names whose value is the name of the file the driver compiles (new at every POCL build)
FILE_NAMES = ("__FILE__", "__FILE_NAME__", "__BASE_FILE__", "__builtin_FILE",
              "__builtin_FILE_NAME", "__builtin_source_location")

#: every name looked for in a text
WATCHED = (*CLOCK, *FILE_NAMES)

_SPLICE = re.compile(r"\\[ \t\f\v]*(?:\r\n|\n\r|\n|\r)")
_IDENT = re.compile(r"[A-Za-z_$][0-9A-Za-z_$]*")
#: ``##`` in any spelling once trigraphs and digraphs are read (``%:%:``, ``??=??=``, ``#%:``)
_PASTE = re.compile(r"(?:#|%:|\?\?=)(?:#|%:|\?\?=)")


def _readings(text: str) -> list[str]:
    """``text`` as written and after line splicing, without and with trigraphs (``??/`` is a
    backslash): every way the preprocessor may read a name in it."""
    if "\\" not in text and "??/" not in text:
        return [text]
    out = [text, _SPLICE.sub("", text)]
    if "??/" in text:
        out.append(_SPLICE.sub("", text.replace("??/", "\\")))
    return out


class _Facts(NamedTuple):
    """What one text holds, read every way: the watched names, whether it pastes, and its
    identifiers (what pasting can join; of a short text that does not paste, found when
    needed)."""

    names: frozenset[str]
    pastes: bool
    pieces: frozenset[str]


_FACTS: OrderedDict[str, _Facts] = OrderedDict()  # headers met again and again
_FACTS_LOCK = threading.Lock()


def _facts(text: str) -> _Facts:
    facts = _FACTS.get(text) if len(text) >= 2048 else None
    if facts is None:
        readings = _readings(text)
        pasting = any(_PASTE.search(r) for r in readings)
        # every watched name starts with "__": a reading without it names none (most sources
        # have it, in __kernel; then one scan a name, as a list, no nested generators)
        found = {n for r in readings if "__" in r for n in [n for n in WATCHED if n in r]}
        facts = _Facts(frozenset(found), pasting,
                       _pieces(readings) if pasting or len(text) >= 2048 else frozenset())
        if 2048 <= len(text) <= 256 << 10:
            with _FACTS_LOCK:
                remember(_FACTS, text, facts, 128)
    return facts


def _pieces(readings: list[str]) -> frozenset[str]:
    """The identifiers of a text as the preprocessor may read it (spliced, if it splices)."""
    return frozenset(name for r in readings[len(readings) > 1:] for name in _IDENT.findall(r))


def spells(name: str, pieces: Collection[str]) -> bool:
    """Whether ``name`` is two or more of ``pieces`` written one after the other (what pasting
    identifiers can make of them; a name that is itself a piece is found without pasting)."""
    ends = [False] * (len(name) + 1)  # ends[i]: name[:i] is made of pieces (one at least)
    for i in range(len(name)):
        if i and not ends[i]:
            continue
        for j in range(i + 1, len(name) + 1 - (i == 0)):
            if name[i:j] in pieces:
                ends[j] = True
    return ends[len(name)]


def pastes(texts: Iterable[str], names: Iterable[str]) -> str:
    """The first of ``names`` that pasting can make in ``texts`` (read together: a header's
    macro may paste the includer's tokens), or ``""``: only where some text pastes (``##``)
    and the identifiers of all of them, read every way, can spell the name."""
    texts = list(texts)
    return _pasted(texts, [_facts(t) for t in texts], names)


def _pasted(texts: list[str], facts: list[_Facts], names: Iterable[str]) -> str:
    """:func:`pastes` of ``texts`` whose facts are known."""
    if not any(f.pastes for f in facts):
        return ""
    pieces: set[str] = set()
    for f, text in zip(facts, texts, strict=True):  # one facts per text
        pieces |= f.pieces if f.pieces or len(text) >= 2048 else _pieces(_readings(text))
    return next((n for n in names if spells(n, pieces)), "")


def _uses(texts: Iterable[str], names: Iterable[str]) -> str:
    """The first of ``names`` (watched ones) found in ``texts``, read every way, pasted ones
    included."""
    texts, names = list(texts), list(names)
    for text in texts:
        found = _facts(text).names
        name = next((n for n in names if n in found), "")
        if name:
            return name
    return pastes(texts, names)


def clock_reason(source: str, options: str, headers: Iterable[tuple[str, bytes]] = ()) -> str:
    """Why a build reads the clock (so that no cached binary can stand for it), else ``""``.
    ``options`` as the driver receives them (with the flags of its environment)."""
    headers = list(headers)
    texts = [("the source", source), ("the options", options),
             *((name.split(" @")[0], data.decode("latin-1")) for name, data in headers)]
    facts = [_facts(text) for _, text in texts]
    for (where, _), f in zip(texts, facts, strict=True):
        name = next((n for n in CLOCK if n in f.names), "")
        if name:
            return (f"{where} reads the clock ({name}): a cached binary would hold another "
                    "build's time")
    name = _pasted([text for _, text in texts], facts, CLOCK)
    if name:
        return (f"its macros can paste {name} (##): a cached binary would hold another "
                "build's time")
    return ""


def rebuilt_alike(source: str, options: str, headers: Headers | None = None) -> bool:
    """Whether another build of ``source`` with ``options``, in another process, surely makes
    the binary this process made: it names no file (none to be edited, created or removed in
    between: a name found nowhere, like ``__has_include("x.h")``, counts; include folders
    count only where something is included, so ``-include``/``-imacros`` do), reads no clock and no
    file name of the driver's, and no driver takes flags from the environment now (a helper
    started before they were set would build without them; one started while they were set
    builds with them, and a change since makes every build bypass the cache:
    :func:`~clmagic.key.includes.driver_flags`).

    With ``headers`` (what the key's include search read: every file and every place it looked)
    a source that names files qualifies too, where no file read is too new to be trusted and no
    header names the clock or a file name either: the caller then checks, once the other build
    is done, that the search finds the same (:func:`~clmagic.key.includes.headers_changed`), as
    it checks after the user's own build."""
    if any(os.environ.get(name) for name in DRIVER_FLAG_VARS):
        return False
    texts = [source, options]
    if headers is not None and not headers.static:
        if headers.too_new or headers.found_with is None:
            return False
        texts += [data.decode("latin-1") for _, data in headers]
    else:
        try:
            # an include folder alone (pyopencl passes -I <pyopencl>/cl to every build) is
            # searched only for a file named, and the source names none: only a forced include
            # reads one
            if includes_of(source) or option_inputs(options.split()).files:
                return False
        except Unkeyable:
            return False
    return not _uses(texts, (*CLOCK, *FILE_NAMES))
