"""A ``-D`` define made from data (a sweep's parameters): the driver must receive exactly
``-DNAME=value``, one option, whatever the value holds.

Why a grammar and not quoting: the options reach the driver as one string that it splits at
spaces (and some drivers read quotes and backslashes in it), so no quoting is portable; a
value the grammar refuses is almost always a mistake (``"1 -DEVIL"``, an option pasted into a
value), and the error names it.
"""

from __future__ import annotations

import math
import numbers
import re

from clmagic._format import end_cut
from clmagic.errors import OptionsError

__all__ = ["define_value", "is_macro_name"]

#: a macro name: a C identifier, ASCII (what the driver's ``-D`` takes)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: a sweep value the driver receives as exactly that define's value: one token of letters,
#: digits and the characters of a simple C expression (``16``, ``-1``, ``0.5f``, ``1e-05``,
#: ``float4``, ``(2*TILE)``, ``a<b?a:b``); no space (it would start another option), quote or
#: backslash (the option parsers read them), nothing else a build option could be made of; a
#: leading ``-`` only for a negative number (``-DEVIL`` is an option pasted in)
_VALUE = re.compile(r"(?:-(?=[0-9.]))?[A-Za-z0-9_.+*/%()<>=!&|^~?:,\[\]]"
                    r"[A-Za-z0-9_.+\-*/%()<>=!&|^~?:,\[\]]*")


def is_macro_name(name: str) -> bool:
    """Whether ``name`` can follow ``-D``: an ASCII C identifier."""
    return _NAME.fullmatch(name) is not None


def define_value(name: object, value: object) -> str:
    """The text of ``value`` in ``-DNAME=value``, or :class:`OptionsError`, one line naming
    the bad value, when the driver would not receive exactly that: a string of the grammar
    above, an ``int`` of 64 bits, or a finite ``float`` (as Python writes it: ``0.001``,
    ``1e-05``). A ``bool`` is refused (``True`` would be a C identifier, not 1), as is any
    other object."""
    where = f"sweep parameter {name}"
    if isinstance(value, bool) or type(value).__name__ in ("bool_", "bool"):
        raise OptionsError(f"{where}: {value!r} is a bool; give 1 or 0 (C has no True/False)")
    if isinstance(value, numbers.Integral):
        if not -(1 << 63) <= int(value) < (1 << 64):  # (and no 5000-digit str() to raise)
            raise OptionsError(f"{where}: {end_cut(hex(int(value)), 24)} is beyond a 64-bit "
                               "integer (what C's long and ulong hold)")
        return str(int(value))
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Rational):
        if not math.isfinite(float(value)):
            raise OptionsError(f"{where}: {value!r} is not a finite number")
        return str(value)
    if not isinstance(value, str):
        raise OptionsError(f"{where}: {value!r} ({type(value).__name__}) is not a value; give "
                           "an int, a float or a string such as '16' or '0.5f'")
    if not _VALUE.fullmatch(value):
        raise OptionsError(f"{where}: {end_cut(repr(value), 60)} {_why_not(value)}")
    return value


def _why_not(value: str) -> str:
    """Why ``value`` is not one define value, in words (the first thing wrong with it)."""
    if not value:
        return "is empty (give 1 to define the name)"
    if value.split() != [value]:
        return "holds a space or line break: the driver would read the rest as more options"
    bad = next((c for c in value if c in "'\"`\\"), None)
    if bad is not None:
        return f"holds {bad!r}, which option parsers read as quoting: give the value bare"
    if value.startswith("-"):
        return "starts with '-' as an option does (a negative number such as -1 is fine)"
    bad = next((c for c in value if not _VALUE.fullmatch("x" + c)), value[0])
    return (f"holds {bad!r}: a value is a number, a name or a simple expression "
            "(letters, digits, _ . + - * / % ( ) < > = ! & | ^ ~ ? : , [ ])")
