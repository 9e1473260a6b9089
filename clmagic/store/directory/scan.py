"""Walking a directory store's device folders: the entries listed (header and metadata of each,
never the binary), the sizes and last uses eviction sorts (one ``stat`` per file), the removal of
evicted entries, and a clear. An entry's size is the same in each (issue 24, item 5): its file,
its ``.hits`` and the code index naming it, what removing it frees. Listings and clears also
sweep what dead writers and removed entries left behind: temp files, ``.hits`` files without
their entry, a cleared code index.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from clmagic._warn import warn_once
from clmagic.entry import Entry, Usage
from clmagic.store.base import Use, is_hex, valid_name
from clmagic.store.directory.files import (
    CODE_SUFFIX,
    HITS_SUFFIX,
    SUFFIX,
    TMP,
    code_index_of,
    drop_code,
    drop_hits,
    index_size,
    read_code_index,
    read_entry_meta,
    sweep_tmp,
    usage_beside,
)

__all__ = ["list_entries", "scan_uses", "remove_uses", "clear"]


def list_entries(root: Path, fingerprint: str | None, kind: str,
                 check_folder: Callable[[Path], None]) -> Iterator[Entry]:
    """Every valid entry under ``root`` (of one device folder with ``fingerprint``), with its
    usage (``kind``: the store's); an unreadable, damaged or misfiled entry is skipped, a folder
    that ``check_folder`` refuses (the store's own check: private, ours) warned of. The store
    passes what it knows rather than itself, so this walk needs none of its inside."""
    try:
        folders = [fingerprint] if fingerprint else sorted(os.listdir(root))
    except OSError:
        return
    for fp in folders:
        if not is_hex(fp, 16):
            continue
        folder = os.path.join(root, fp)
        try:
            check_folder(Path(folder))
            names = set(os.listdir(folder))
        except PermissionError as exc:
            warn_once(f"cache {exc.strerror}; its entries are not used")
            continue
        except OSError:
            continue
        if any(TMP in name for name in names):  # leftovers of killed writers
            sweep_tmp(Path(folder), names)
        for name in names:
            key = name[: -len(SUFFIX)]
            if not (name.endswith(SUFFIX) and is_hex(key, 64)):
                continue
            meta, size = read_entry_meta(os.path.join(folder, name), listing=True)
            if meta is None or meta.key != key or meta.fingerprint != fp:
                continue  # unreadable, damaged or filed under another name
            usage = (usage_beside(Path(folder, name), size, kind) if key + HITS_SUFFIX in names
                     else Usage(stored_bytes=size, store=kind))
            if meta.code_key + CODE_SUFFIX in names:  # the code index counts for its entry
                index = index_size(os.path.join(folder, meta.code_key + CODE_SUFFIX), key)
                usage = dataclasses.replace(usage, stored_bytes=usage.stored_bytes + index)
            yield Entry(meta, usage)


def scan_uses(root: Path) -> list[Use]:
    """Every entry's last use (the ``.hits`` file's mtime, else the entry's) and size, from one
    ``stat`` per file and one read of each code index (64 bytes): no entry is opened. The size
    is the listing's (the entry file, its ``.hits`` and the code index naming it: what removing
    it frees), so the size limit, the panel's total and a clear count the same bytes."""
    out: list[Use] = []
    try:
        folders = [f for f in os.listdir(root) if is_hex(f, 16)]
    except OSError:
        return out
    for fp in folders:
        files = _stats_of(os.path.join(root, fp))
        indexes = _index_bytes(os.path.join(root, fp), files)
        for name, st in files.items():
            key = name[: -len(SUFFIX)]
            if not (name.endswith(SUFFIX) and is_hex(key, 64)):
                continue
            hits = files.get(key + HITS_SUFFIX)
            used = max(st.st_mtime, hits.st_mtime) if hits else st.st_mtime
            size = st.st_size + (hits.st_size if hits else 0) + indexes.get(key, 0)
            out.append(Use(used, size, fp, key, (st.st_ino, st.st_mtime_ns)))
    return out


def _stats_of(folder: str) -> dict[str, os.stat_result]:
    """The ``lstat`` of each entry, ``.hits`` and code index file in ``folder`` (none when it
    cannot be read)."""
    files: dict[str, os.stat_result] = {}
    try:
        with os.scandir(folder) as it:
            for d in it:
                if d.name.endswith((SUFFIX, HITS_SUFFIX, CODE_SUFFIX)):
                    try:
                        files[d.name] = d.stat(follow_symlinks=False)
                    except OSError:
                        continue
    except OSError:
        return {}
    return files


def _index_bytes(folder: str, files: dict[str, os.stat_result]) -> dict[str, int]:
    """Entry key -> the bytes of the code index that names it, for the entries in ``files``
    (an index naming no entry here counts for none)."""
    out: dict[str, int] = {}
    for name in files:
        if name.endswith(CODE_SUFFIX):
            key = read_code_index(os.path.join(folder, name))
            if key is not None and key + SUFFIX in files:
                out[key] = out.get(key, 0) + index_size(os.path.join(folder, name), key)
    return out


def remove_uses(root: Path, victims: list[Use]) -> list[Use]:
    """Unlink each entry under ``root`` unless it was rewritten since it was listed (another
    process's fresh save keeps its entry). A reader that has the file open still reads it
    whole; one that opens it later finds nothing and rebuilds. A name the cache never files is
    left alone."""
    gone = []
    for v in victims:
        if not valid_name(v.fingerprint, v.key):
            continue
        path = Path(root, v.fingerprint, v.key + SUFFIX)
        try:
            st = path.lstat()
            if (st.st_ino, st.st_mtime_ns) != v.token:
                continue
            index = code_index_of(path, v.key)
            path.unlink()
        except OSError:
            continue  # already gone (another process evicted it too): not counted twice
        drop_hits(path)
        drop_code(index)
        gone.append(v)
    return gone


def clear(root: Path, fingerprint: str | None) -> tuple[int, int]:
    """Remove every entry under ``root`` (of one device folder with ``fingerprint``) with what
    lies beside them; (entries removed, bytes freed)."""
    count = freed = 0
    for path in list(_files(root, fingerprint)):
        key = path.name[: -len(SUFFIX)]
        try:
            size = path.lstat().st_size
            index = code_index_of(path, key)  # counted with its entry, as the listing counts it
            path.unlink()
        except OSError:
            continue
        count += 1
        freed += size + drop_hits(path) + (len(key) if index is not None else 0)
        drop_code(index)
    freed += _sweep_cleared(root, fingerprint)
    return count, freed


def _files(root: Path, fingerprint: str | None) -> Iterator[Path]:
    try:
        folders = [root / fingerprint] if fingerprint else sorted(root.iterdir())
    except OSError:
        return
    for folder in folders:
        if not is_hex(folder.name, 16):
            continue
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if name.endswith(SUFFIX) and is_hex(name[: -len(SUFFIX)], 64):
                yield folder / name


def _sweep_cleared(root: Path, fingerprint: str | None) -> int:
    """Remove ``.hits`` files whose entry is gone (a hit counted while another process deleted
    the entry), the code index of the cleared folders and every temp file (a clear empties the
    folder); returns the bytes freed."""
    freed = 0
    try:
        folders = [fingerprint] if fingerprint else os.listdir(root)
    except OSError:
        return 0
    for fp in folders:
        folder = root / fp
        try:
            names = set(os.listdir(folder)) if is_hex(fp, 16) else set()
        except OSError:
            continue
        sweep_tmp(folder, names, everything=True)
        for name in names:
            if name.endswith(HITS_SUFFIX) and name[: -len(HITS_SUFFIX)] + SUFFIX not in names:
                freed += drop_hits(folder / (name[: -len(HITS_SUFFIX)] + SUFFIX))
            elif name.endswith(CODE_SUFFIX) and is_hex(name[: -len(CODE_SUFFIX)], 64):
                try:  # a cleared folder's code index points at nothing
                    (folder / name).unlink()
                except OSError:
                    pass
    return freed
