"""The code key: a second key over a source's *code*, so that a change of comments or spacing
alone finds the binary already built for the same code (the REKEYED outcome).

:func:`code_form` runs the first translation phases of the OpenCL C preprocessor (line splices,
comments replaced by one space, preprocessing tokens, directive lines) and writes the tokens back
out in one canonical spelling:

* outside directives, tokens are separated by one space only where gluing them would lex
  differently (``a - -b``, ``+ +``, ``/ /``, ``x . 1``, ``L "s"``, ``. . .``), else by nothing,
  and line breaks go (they only move diagnostics' line numbers);
* each directive stays one line, its tokens separated by one space exactly where the source had
  whitespace or a comment (C's rule for identical macro definitions, and ``#define F(x)`` against
  ``#define F (x)``); ``#include`` and ``#pragma`` lines are kept byte for byte;
* string and character literals and header names are tokens, kept exactly.

Two sources with the same form are the same preprocessing-token sequence with the same directive
lines, so the preprocessor, and the compiler behind it, cannot tell them apart except by line and
column numbers. Where those, or whitespace itself, could reach the program, there is no form
(``None``) and no rekeying: see :func:`code_form` for the list. A form is checked by lexing it
again: it must give back exactly the source's tokens.

``#if 0`` groups get the same treatment as the rest: a skipped group's contents are lexed by the
same phases (comments, literals) and only its directive lines, which keep their tokens and
structure, decide what is skipped; a source whose skipped text does not lex cleanly (a lone
apostrophe in prose) has no form.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import NamedTuple

from clmagic.key.clock import pastes

__all__ = ["code_form", "code_refusal", "header_refusal", "option_refusal", "MAX_REKEY_SOURCE"]

#: sources above this many characters are not rekeyed (the form costs a Python-level lex)
MAX_REKEY_SOURCE = 1 << 20

_TOKEN = re.compile(
    r"""
     (?P<ws>[ \t\v\f\r]+)
    |(?P<nl>\n)
    |(?P<lc>//[^\n]*)
    |(?P<bc>/\*.*?\*/)
    |(?P<open>/\*)
    |(?P<str>(?:u8|[uUL])?"(?:\\.|[^"\\\n])*")
    |(?P<chr>(?:u8|[uUL])?'(?:\\.|[^'\\\n])*')
    |(?P<num>\.?[0-9](?:[eEpP][+-]|[0-9A-Za-z_$.])*)
    |(?P<id>[A-Za-z_$][0-9A-Za-z_$]*)
    |(?P<punct>%:%:|\.\.\.|<<=|>>=|<=>|->\*|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||[*/%+\-&^|]=
        |\#\#|::|\.\*|<:|:>|<%|%>|%:|[\[\](){}.&*+\-~!/%<>^|?:;=,\#])
    |(?P<other>[@`])
    |(?P<bad>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_SPACE = {"ws", "lc", "bc"}
_DIGRAPHS = {"<:", ":>", "<%", "%>", "%:", "%:%:"}
#: identifiers whose value depends on where a token stands (line, column, file), that make
#: spacing visible (``_Pragma`` strings are pragmas), or that read files by a spelled-out name
_POSITIONAL = {
    "__LINE__", "__FILE__", "__COUNTER__", "__FILE_NAME__", "__BASE_FILE__",
    "__INCLUDE_LEVEL__", "__TIMESTAMP__", "__TIME__", "__DATE__", "__builtin_LINE",
    "__builtin_FILE", "__builtin_COLUMN", "__builtin_FILE_NAME", "__builtin_FUNCTION",
    "__builtin_source_location",
    "_Pragma", "__has_include", "__has_include_next", "__has_embed",
}
#: pragmas whose meaning is their own text and their place in the token sequence; others (a
#: ``clang diagnostic`` one can turn a spacing-sensitive warning into an error) are not rekeyed
_PRAGMAS = {"OPENCL", "unroll", "nounroll", "loop", "once"}
_TRIGRAPH = re.compile(r"\?\?[=(/)'<!>-]")
#: a backslash that clang reads as a splice (blanks, then any line end) or that ends the text;
#: a header may have the plain ``\\`` + ``\\n`` splice, which its form removes first
_ANY_SPLICE = re.compile(r"\\[ \t\f\v]*(?:[\r\n]|\Z)")
_INCLUDES = {"include", "include_next", "import"}


class _Refused(Exception):
    """The source cannot be given a code form; the message says why."""


class _Tok(NamedTuple):
    kind: str
    text: str
    start: int
    gap: bool  # whitespace, a comment or a line break came before it


def _lex(text: str) -> list[list[_Tok]]:
    """The source's logical lines (a comment's line breaks do not end one), each a list of
    significant tokens; raises :class:`_Refused` for text no compiler lexes the same way."""
    lines: list[list[_Tok]] = [[]]
    gap = True
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup or "bad"
        if kind in _SPACE:
            gap = True
        elif kind == "nl":
            lines.append([])
            gap = True
        elif kind == "open":
            raise _Refused("a comment is not closed")
        elif kind == "bad":
            ch = m.group()
            if ch in "\"'":
                what = "string" if ch == '"' else "character"
                line_no = text.count("\n", 0, m.start()) + 1
                raise _Refused(f"an unterminated {what} literal on line {line_no}")
            raise _Refused(f"character {ch!r} outside literals and comments")
        else:
            tok = m.group()
            if kind == "punct" and tok in _DIGRAPHS:
                raise _Refused(f"digraph {tok!r}")
            if kind == "id" and tok in _POSITIONAL:
                raise _Refused(f"it uses {tok}")
            lines[-1].append(_Tok(kind, tok, m.start(), gap))
            gap = False
    return [line for line in lines if line]


def _merges(a: str, b: str) -> bool:
    """Would ``a`` and ``b`` written without a space lex as something else?"""
    if a == "." and b == ".":  # ". . ." would become "...": ".." is always written ". ."
        return True
    m = _TOKEN.match(a + b)
    return m is None or m.end() != len(a) or m.lastgroup in _SPACE


def _directive(line: list[_Tok], text: str, header: bool) -> str:
    """One directive line in canonical spelling (checks what makes a directive unsafe)."""
    name = line[1].text if len(line) > 1 else ""
    if not header and (name == "line" or len(line) > 1 and line[1].kind == "num"):
        raise _Refused("a #line directive")
    start = line[0].start
    if name in _INCLUDES:
        # kept to the end of its physical line: inside <a//b.h> nothing is a comment
        end = text.find("\n", start)
        raw = text[start:] if end < 0 else text[start:end]
        if not header and ("/*" in raw or "//" in raw):
            raise _Refused("a comment on an #include line")
        return raw
    if name == "pragma":
        first = line[2].text if len(line) > 2 else ""
        second = line[3].text if len(line) > 3 else ""
        if first not in _PRAGMAS and not (first == "clang" and second == "loop"):
            raise _Refused(f"a #pragma {first} line".replace("  ", " "))
        return text[start:line[-1].start + len(line[-1].text)]
    if name == "define" and len(line) > 3:
        body = [t.text for t in line[3:]]
        if "#" in body:
            raise _Refused("a macro stringizes its argument (#)")
        if "##" in body and not header:
            raise _Refused("a macro pastes tokens (##)")
    out = "#" + name
    for tok in line[2:]:
        out += (" " if tok.gap else "") + tok.text
    return out


def _structure(lines: list[list[_Tok]]) -> list[object]:
    """What the preprocessor sees: code tokens in order, each directive line as one item."""
    seen: list[object] = []
    for line in lines:
        if line[0].text == "#":
            seen.append(tuple((t.kind, t.text) for t in line))
        else:
            seen.extend((t.kind, t.text) for t in line)
    return seen


def _phases(text: str, header: bool) -> str:
    """Translation phases 1–2 the way clang runs them, where the form models them: a source
    with a line continuation, a header with one other than ``\\`` + ``\\n``, or either with a
    ``\\r`` that is not part of ``\\r\\n`` (clang ends a line there; a lexer reading it as
    a blank would see code as a comment), is refused."""
    if header:
        text = text.replace("\r\n", "\n")
    if "\r" in text:
        raise _Refused("a carriage return that is not part of a CRLF line end (a line end to "
                       "clang)")
    if header:
        text = text.replace("\\\n", "")
    if _ANY_SPLICE.search(text):
        raise _Refused("a line continuation (backslash at the end of a line)")
    return text


def _form(text: str, header: bool = False) -> tuple[str, list[list[_Tok]]]:
    text = _phases(text, header)
    if _TRIGRAPH.search(text):
        raise _Refused("a trigraph (??x)")
    lines = _lex(text)
    out: list[str] = []
    prev = ""
    for line in lines:
        if line[0].text == "#":
            if prev:
                out.append("\n")
            out.append(_directive(line, text, header) + "\n")
            prev = ""
            continue
        for tok in line:
            # the source's spacing plays no part; "? ?=" must not become the trigraph "??="
            if prev and (_merges(prev, tok.text)
                         or tok.text[0] in "=(/)'<!>-" and out[-2:] == ["?", "?"]):
                out.append(" ")
            out.append(tok.text)
            prev = tok.text
    if prev:
        out.append("\n")
    return "".join(out), lines


def code_form(source: str) -> tuple[str | None, str]:
    """The canonical form of ``source``'s code, or ``(None, reason)`` where changing comments
    or spacing could change what the compiler produces. No form when the source has:

    * a line continuation (backslash-newline), a trigraph, or a digraph;
    * an unterminated string, character literal or comment, a backslash or non-ASCII character
      outside literals and comments (lexing that drivers do not all agree on);
    * ``__LINE__``, ``__FILE__``, ``__COUNTER__`` or any other name whose value depends on
      where a token stands; ``_Pragma``; ``__has_include`` (its ``<a b.h>`` is not a token);
    * a macro that stringizes (``#``: whitespace becomes visible) or pastes (``##``);
    * a ``\\r`` that is not part of ``\\r\\n`` (clang ends a line there), a backslash before
      blanks and a line end or at the very end;
    * ``#line`` (or a ``# 33 "file"`` line marker);
    * a ``#pragma`` other than ``OPENCL …``, ``unroll``, ``nounroll``, ``clang loop …``
      (those are kept byte for byte, so any change to such a line is a new build);
    * a comment on an ``#include`` line (inside ``<a/*b*/.h>`` it would not be a comment).
    """
    try:
        if len(source) > MAX_REKEY_SOURCE:
            raise _Refused(f"over {MAX_REKEY_SOURCE >> 20} MiB")
        form, lines = _form(source)
        if not form.strip():
            raise _Refused("no code")
        if _TRIGRAPH.search(form) or _structure(_lex(form)) != _structure(lines):  # lex again
            raise _Refused("its spacing could not be made canonical")
        return form, ""
    except _Refused as exc:
        return None, str(exc)


@functools.lru_cache(maxsize=64)
def header_refusal(data: bytes) -> str:
    """Why an included header stops its includer from being rekeyed, else ``""``: a macro of
    the header could make the includer's spacing or line numbers visible (stringizing,
    ``__LINE__``), or clang could read it otherwise than the form's lexer (a lone ``\\r``, a
    splice with blanks, trigraphs, digraphs). The header's bytes enter the code key unchanged;
    its own ``\\`` + newline line continuations are harmless to the includer, and so is its
    token pasting unless it can spell a position-dependent name (:func:`code_refusal` checks
    that over the whole build). Remembered by content: a library's headers (pyopencl's) are
    included by many programs, and lexing one costs milliseconds."""
    try:
        _form(data.decode("utf-8"), header=True)
        return ""
    except UnicodeDecodeError:
        return "a header is not UTF-8 text"
    except _Refused as exc:
        return str(exc)


_OPTION_REFUSALS = (
    (re.compile(r"(?:^|\s)-g"), "debug information records line numbers (-g)"),
    (re.compile(r"(?:^|\s)-(?![DI])\S*(?:line-?info|debug)", re.I),
     "debug information records line numbers"),
    (re.compile(r"(?:^|\s)-Werror"), "-Werror turns spacing-sensitive warnings into errors"),
    (re.compile(r"(?:^|\s)-pedantic-errors"),
     "-pedantic-errors turns spacing-sensitive warnings into errors"),
    (re.compile(r"c\+\+|clc\+\+", re.I), "C++ for OpenCL lexes differently"),
    (re.compile(r"#"), "a -D macro with # can stringize spacing"),
    (re.compile("|".join(sorted(_POSITIONAL))), "a -D macro uses a position-dependent name"),
)


def option_refusal(options: str) -> str:
    """Why these build options rule out rekeying, else ``""``."""
    for pattern, reason in _OPTION_REFUSALS:
        if pattern.search(options):
            return reason
    return ""


def code_refusal(
    source: str, options: str, headers: Iterable[tuple[str, bytes]] = ()
) -> tuple[str | None, str]:
    """The code form of a build (source, options, included headers) for its code key, or
    ``(None, reason)`` where the build cannot be rekeyed."""
    reason = option_refusal(options)
    if reason:
        return None, reason
    form, reason = code_form(source)
    if form is None:
        return None, reason
    headers = list(headers)
    for name, data in headers:
        why = header_refusal(data)
        if why:
            return None, f"{why} (in {name.split(' @')[0]})"
    # a header's macro may paste (##) the includer's tokens, or its own, into a name the
    # lexer never saw: __LI ## NE__ is __LINE__
    pasted = pastes([source, options, *(data.decode("latin-1") for _, data in headers)],
                    sorted(_POSITIONAL))
    if pasted:
        return None, f"a macro pastes tokens (##) that can spell {pasted}"
    return form, ""
