"""What a forked child does with the state its parent kept: each module that keeps some registers
how to make it fresh (:func:`after_fork`), and hands what belongs to the parent to
:func:`disown`.

A child made by ``os.fork()`` (``multiprocessing``'s default start on Linux, a worker pool, a
user's own fork) has one thread, the one that forked, and a copy of everything else. So:

- a lock that another thread of the parent held at that moment stays held for ever: it is made
  anew;
- a queue whose worker thread the child does not have is never served (waiting for it hangs the
  child's exit): the parent's jobs are the parent's, the child starts empty;
- what refers to the parent's driver, files or processes (OpenCL contexts and programs, a
  SQLite connection, the pipes of a helper process, a counter file's descriptor) must be
  neither used nor released by the child: OpenCL objects do not work after a fork (POCL's
  worker threads are not in the child), closing an inherited SQLite connection can checkpoint
  or truncate a WAL under the parent's feet, writing to a helper's pipe interleaves with the
  parent's messages. Such objects are *disowned*: kept referenced for the child's whole life,
  so that no finaliser ever releases them there.

This module is on the ground floor (it imports nothing of clmagic), so every layer can use it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["after_fork", "around_fork", "disown"]

#: what a forked child inherited and must never use or release (see the module's text)
_disowned: list[object] = []


def after_fork(reset: Callable[[], None]) -> None:
    """Run ``reset()`` in every child forked from now on, before the child's own code runs (in
    the order registered). A reset runs while the child has one thread: it takes no lock that
    another thread may have held, it replaces it."""
    if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
        os.register_at_fork(after_in_child=reset)


def around_fork(before: Callable[[], None], after_in_parent: Callable[[], None]) -> None:
    """Run ``before()`` in the forking thread just before every fork, and
    ``after_in_parent()`` in the parent just after it (e.g. to hold a worker still across
    the fork, so that the child's copy is not caught mid-way)."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=before, after_in_parent=after_in_parent)


def disown(*things: object) -> None:
    """Keep ``things`` (the parent's) referenced for the child's life: never used, never
    released in this process."""
    _disowned.extend(t for t in things if t is not None)
