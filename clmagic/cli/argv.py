"""The command line before argparse reads it: values that start with ``-`` joined to their
option, and a first word that is no command answered with the nearest one."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

__all__ = ["join_dash_values", "unknown_command"]


#: options whose value may start with "-" (a negative size is then refused by clmagic, in its
#: own words, instead of argparse's "expected one argument"; build options start with "-")
_DASH_VALUES = ("--max-size", "--older-than", "--opts")


def join_dash_values(argv: list[str]) -> list[str]:
    """``--max-size -1G`` as ``--max-size=-1G``: argparse would read ``-1G`` as an option."""
    if not argv or argv[0] not in ("clear", "prune", "warm"):
        return argv  # (``run`` hands its arguments to the script untouched)
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in _DASH_VALUES and arg.startswith("-"):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def unknown_command(argv: list[str], commands: Sequence[str]) -> str:
    """The one-line complaint about a first word that is no command ("" when it is one, or
    is an option: argparse says those), with the nearest command, as git does."""
    if not argv or argv[0].startswith("-"):
        return ""
    if argv[0] in commands:
        return ""
    near = difflib.get_close_matches(argv[0], commands, n=1, cutoff=0.5)
    hint = f"did you mean '{near[0]}'?" if near else "commands: " + ", ".join(commands)
    return f"clmagic: '{argv[0]}' is not a clmagic command; {hint} (clmagic --help)"
