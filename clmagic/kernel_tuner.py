"""Kernel Tuner through clmagic's cache (``pip install 'clmagic[tune]'``)::

    import clmagic
    from clmagic.kernel_tuner import FactsObserver
    from kernel_tuner import tune_kernel

    clmagic.install()  # every pyopencl build through the cache: a re-tune's builds are HITs
    results, env = tune_kernel(name, source, size, args, params, lang="OpenCL",
                               observers=[FactsObserver()])

A thin public front: the observer is :class:`clmagic.cache.tuner.FactsObserver` (documented
there), and Kernel Tuner is imported by that module only, when this one is imported.
"""

from __future__ import annotations

from clmagic.cache.tuner import COLUMNS, NVIDIA_COLUMNS, FactsObserver

__all__ = ["FactsObserver", "COLUMNS", "NVIDIA_COLUMNS"]
