"""Long help (``%clcache?``) printed where the output goes, and paged only on a terminal.

IPython pages long text through ``less`` (or ``$PAGER``) when ``TERM`` names a terminal, and
the pager writes to the process's own terminal, not to ``sys.stdout``: where the output has
been redirected in the process (``IPython.utils.capture``, ``contextlib.redirect_stdout``, a
test suite run from a terminal, a tool that drives a shell), the help goes past the reader and
the capture is empty. So, after every other pager the shell has (Jupyter's help panel, IPython's
``display_page``), this one prints the text when ``sys.stdout`` is not a terminal, and leaves
IPython's own pager to a terminal, where paging is what its user asked for.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from IPython.core.error import TryNext

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

__all__ = ["register", "print_unless_terminal"]

#: after IPython's default hook (100, which always passes on), and so after the kernel's (99)
#: and ``display_page``'s (90): the last word before IPython's own pager
_PRIORITY = 100


def print_unless_terminal(shell: object, data: Any, start: int = 0,
                          screen_lines: int = 0) -> None:
    """IPython's ``show_in_pager`` hook: print ``data`` (text, or a MIME bundle's
    ``text/plain``) from line ``start`` when ``sys.stdout`` is not a terminal; on a terminal,
    pass on (``TryNext``) to IPython's pager."""
    isatty = getattr(sys.stdout, "isatty", None)
    if callable(isatty) and isatty():
        raise TryNext
    text = data.get("text/plain", "") if isinstance(data, dict) else str(data)
    print("\n".join(str(text).splitlines()[max(start, 0):]))


def register(shell: InteractiveShell) -> None:
    """Add :func:`print_unless_terminal` to ``shell``'s pagers, once (a shell whose pager is
    one function of its own, not IPython's chain, keeps it)."""
    hooks = getattr(getattr(shell.hooks, "show_in_pager", None), "chain", None)
    if not isinstance(hooks, list) or any(
            getattr(hook, "__func__", hook) is print_unless_terminal for _, hook in hooks):
        return
    # IPython leaves set_hook unannotated
    shell.set_hook("show_in_pager", print_unless_terminal, _PRIORITY)  # type: ignore[no-untyped-call]
