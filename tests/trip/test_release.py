"""Programs the memory front lets go are released on the saver's thread, not in the build that
replaced them (clmagic/trip/release.py), and never by a forked child."""

from __future__ import annotations

import gc
import os
import threading
import weakref

from clmagic.trip.background import Saver
from clmagic.trip.release import Releaser


class Program:
    """Stands for a driver program: says on which thread it was released."""

    released_on: list[str] = []

    def __del__(self) -> None:
        Program.released_on.append(threading.current_thread().name)


def test_let_go_releases_later_on_the_savers_thread():
    saver = Saver()
    saver.LAZY_S = 60.0  # no release before the flush, however long a loaded run stalls here
    releaser = Releaser(saver)
    Program.released_on.clear()
    progs = [Program(), Program()]
    alive = [weakref.ref(p) for p in progs]
    releaser.let_go(progs)
    del progs
    gc.collect()
    assert all(r() is not None for r in alive)  # not released in the caller's build
    assert len(releaser) == 2
    assert saver.flush(timeout=10)
    gc.collect()
    assert all(r() is None for r in alive)
    assert Program.released_on == ["clmagic-saver", "clmagic-saver"]
    assert len(releaser) == 0


def test_a_forked_child_releases_nothing_of_its_parent():
    saver = Saver()
    releaser = Releaser(saver)
    releaser.let_go([Program()])
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's program is disowned, never released here
        Program.released_on.clear()
        releaser.reset_after_fork()
        gc.collect()
        os.write(w, str(len(Program.released_on)).encode() + b"," + str(len(releaser)).encode())
        os._exit(0)
    os.close(w)
    got = os.read(r, 100).decode()
    os.waitpid(pid, 0)
    assert got == "0,0"
    assert saver.flush(timeout=10)
