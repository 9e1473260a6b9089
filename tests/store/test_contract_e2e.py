"""The validators' contract end to end: an entry file in a directory store whose metadata holds
``"created"`` as a 401-digit integer (its CRC right, so only the parse can refuse it) made
``build()`` and ``clmagic ls`` raise OverflowError. Now the build rebuilds it (a damaged
entry), and ``clmagic ls`` says in one line that it is damaged, with no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib

from conftest import child_env, kernel_value

import clmagic
from clmagic.entry_file import HEADER, MAGIC

SRC = "__kernel void k(__global int *a) { a[0] = 41; }\n"


def _damage(path, field: str, value: object) -> None:
    """Rewrite the entry file with one metadata field replaced, its header and CRC right."""
    data = path.read_bytes()
    _magic, version, meta_len, _crc, _res, bin_len = HEADER.unpack_from(data)
    meta = json.loads(data[HEADER.size:HEADER.size + meta_len])
    meta[field] = value
    raw = json.dumps(meta, separators=(",", ":"), sort_keys=True).encode()
    rest = data[HEADER.size + meta_len:]
    path.write_bytes(HEADER.pack(MAGIC, version, len(raw), zlib.crc32(raw), 0, bin_len)
                     + raw + rest)


def test_a_401_digit_created_is_damage_not_a_crash(settings, cache_dir):
    first = clmagic.Compiler(settings)
    assert first.build(SRC).saved
    entries = list(cache_dir.rglob("*.clbin"))
    assert len(entries) == 1
    for field in ("created", "build_ms", "source_bytes"):
        _damage(entries[0], field, 10 ** 400)
        ls = subprocess.run([sys.executable, "-m", "clmagic", "ls"], capture_output=True,
                            text=True, timeout=120,
                            env=child_env(CLMAGIC_CACHE_DIR=str(cache_dir)))
        said = ls.stdout + ls.stderr
        assert ls.returncode == 0 and "Traceback" not in said and "Error" not in said, said
        damaged = [ln for ln in ls.stderr.splitlines() if "is damaged" in ln]
        assert len(damaged) == 1 and f"metadata field {field!r}" in damaged[0], said
        again = clmagic.Compiler(settings).build(SRC)
        assert again.outcome in ("MISS", "CORRUPT") and kernel_value(again) == 41, again
        assert again.saved
        entries = list(cache_dir.rglob("*.clbin"))
