"""A POCL binary handed to the driver with a build folder of its own.

A POCL binary names the folder its program's files go to (kernels linked at their first launch
for each work-group shape): at offset 36, the program's build hash, 40 characters and a NUL.
With POCL's kernel cache on that is a hash of what was built, shared on purpose. With it off
(``POCL_KERNEL_CACHE=0``, what ``binder/start`` sets) it is the random name of the folder the
*building* process used (``_UNCACHED_xxxxxx``), and POCL removes the folder when a program
made from the binary is released. Every process, and every program in one process, loaded from
the same stored binary thus used the same folder, and a release anywhere removed it under a
kernel being linked elsewhere: POCL then aborts the process ("Final linking of kernel k
failed"; seen with several processes reading a cache that eviction kept rewriting, and alone
with the readout helper's binary loaded again and again). Plain pyopencl does the same with any
binary loaded twice.

:func:`own_folder` gives each load a folder name of its own (random, 178 bits) wherever this
process's POCL does not keep its cache; a POCL binary whose layout this module does not know is
refused there (:class:`UnsafeBinary`, a :class:`~clmagic.errors.CorruptEntry`: the entry is
built from source instead)."""

from __future__ import annotations

import secrets
import string
import struct

from clmagic.errors import CorruptEntry
from clmagic.opencl.driver_env import pocl_cache_kept

__all__ = ["MAGIC", "UnsafeBinary", "own_folder", "folder_of"]

MAGIC = b"poclbin\0"
#: binary format versions whose build hash is at :data:`_HASH` (POCL 3.0 and 3.1 write 9)
KNOWN_VERSIONS = frozenset({9})
_VERSION = struct.Struct("<I")
_HASH = slice(36, 77)  # SHA1_DIGEST_SIZE * 2 + 1 bytes: the name, then NULs
_PREFIX = b"_UNCACHED_"
_ALPHABET = string.ascii_letters + string.digits
_NAME_CHARS = frozenset((_ALPHABET + "_/").encode())


class UnsafeBinary(CorruptEntry):
    """A POCL binary this process cannot give a folder of its own (its POCL would share one):
    not loaded, the entry is rebuilt."""


def folder_of(binary: bytes) -> bytes | None:
    """The folder name a POCL binary of a known layout names, ``None`` for anything else."""
    if not binary.startswith(MAGIC) or len(binary) < _HASH.stop:
        return None
    if _VERSION.unpack_from(binary, 16)[0] not in KNOWN_VERSIONS:
        return None
    name, nul, rest = binary[_HASH].partition(b"\0")
    if not nul or rest.strip(b"\0") or not name or not set(name) <= _NAME_CHARS:
        return None
    return name


def own_folder(binary: bytes) -> bytes:
    """``binary`` as this load must hand it to the driver: itself where it is not POCL's or
    POCL keeps its cache; else with a build folder name no other load uses. Raises
    :class:`UnsafeBinary` for a POCL binary of a layout not known here (cache off)."""
    if not binary.startswith(MAGIC) or pocl_cache_kept():
        return binary
    if folder_of(binary) is None:
        raise UnsafeBinary("a POCL binary of a layout clmagic does not know, with POCL's "
                           "kernel cache off: loading it could remove another program's files")
    size = _HASH.stop - _HASH.start - 1 - len(_PREFIX)
    name = _PREFIX + "".join(secrets.choice(_ALPHABET) for _ in range(size)).encode()
    return binary[:_HASH.start] + name + b"\0" + binary[_HASH.stop:]
