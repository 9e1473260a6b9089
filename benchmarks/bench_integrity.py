"""What a HIT's integrity check costs, entry format 1 against format 2 (issue 23).

Format 1 checked every loaded entry with SHA-256 (the binary's checksum, the metadata's digest)
and, with a team secret, HMAC-SHA256 over the metadata. Format 2 follows ccache: XXH3-128 for the
checksum and the digest, keyed BLAKE3 over the metadata and the binary for the signature. Both
are timed here on the same entry (its canonical metadata from :func:`clmagic.entry.canonical`),
for a 1 MB and a 40 KB binary, as the check alone (the hashes and the comparisons) and as the
whole decode of an entry file (:func:`clmagic.entry_file.decode`: header, JSON, checks) for
format 2. The cache key's hash is timed beside it (SHA-256 against BLAKE3 over a 40 KB source
and three headers), for the choice of the key's hash.

    .venv/bin/python benchmarks/bench_integrity.py [--out benchmarks/results/integrity-zen4.txt]

Ratios are printed (format 2 / format 1); best of several repeats, so that noise from the other
processes of a shared machine counts as little as it can.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import platform
import ssl
import struct
import subprocess
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

import blake3
import xxhash

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clmagic._secret import Secret  # noqa: E402
from clmagic.entry import Entry, canonical, seal, signed  # noqa: E402
from clmagic.entry_file import decode, encode  # noqa: E402

SIZES = {"1 MB": 1 << 20, "40 KB": 40 << 10}
KEY = b"k" * 32


def best_us(fn: Callable[[], object], budget_s: float = 0.6) -> float:
    """The best time of one call in µs, over repeats that fill about ``budget_s``."""
    timer = timeit.Timer(fn)
    n, t = timer.autorange()
    per = max(1, int(n * budget_s / max(t, 1e-9) / 9))
    return min(timer.repeat(9, per)) / per * 1e6


def _entry(size: int) -> Entry:
    binary = os.urandom(size)
    return Entry.create("a" * 64, "b" * 16, binary, kernels=["k1", "k2", "k3"], options="-O3",
                        device="Synthetic", platform="Portable Computing Language",
                        driver="6.0", source_bytes=40 << 10, build_ms=120.0, created=1.7e9,
                        build_log="warning: something\n" * 20, headers=["a.h", "b.h", "c.h"])


def v1_check(raw: bytes, binary: bytes, sha: str, digest: str, sig: str | None) -> bool:
    """Format 1's check of a loaded entry: SHA-256 of the binary and of the metadata, and the
    HMAC-SHA256 of the metadata with a team secret."""
    ok = hashlib.sha256(binary).hexdigest() == sha
    ok &= hmac.compare_digest(hashlib.sha256(raw).hexdigest(), digest)
    if sig is not None:
        ok &= hmac.compare_digest(hmac.new(KEY, raw, hashlib.sha256).hexdigest(), sig)
    return ok


def v2_check(raw: bytes, binary: bytes, xxh: str, digest: str, sig: str | None) -> bool:
    """Format 2's check: XXH3-128 of the binary and of the metadata, and keyed BLAKE3 over the
    metadata and the binary with a team secret."""
    ok = xxhash.xxh3_128_hexdigest(binary) == xxh
    ok &= hmac.compare_digest(xxhash.xxh3_128_hexdigest(raw), digest)
    if sig is not None:
        h = blake3.blake3(struct.pack("<Q", len(raw)), key=KEY)
        h.update(raw)
        h.update(binary)
        ok &= hmac.compare_digest(h.hexdigest(), sig)
    return ok


def _rows(label: str, size: int) -> list[str]:
    entry = _entry(size)
    binary, raw = entry.binary or b"", canonical(entry.meta)
    sha, xxh = hashlib.sha256(binary).hexdigest(), entry.meta.binary_xxh3
    d1, d2 = hashlib.sha256(raw).hexdigest(), xxhash.xxh3_128_hexdigest(raw)
    s1 = hmac.new(KEY, raw, hashlib.sha256).hexdigest()
    h = blake3.blake3(struct.pack("<Q", len(raw)), key=KEY)
    h.update(raw)
    h.update(binary)
    s2 = h.hexdigest()
    assert v1_check(raw, binary, sha, d1, s1) and v2_check(raw, binary, xxh, d2, s2)
    out = []
    for what, a, b in (
        ("private (checksum + digest)", lambda: v1_check(raw, binary, sha, d1, None),
         lambda: v2_check(raw, binary, xxh, d2, None)),
        ("signed (+ team signature)", lambda: v1_check(raw, binary, sha, d1, s1),
         lambda: v2_check(raw, binary, xxh, d2, s2)),
    ):
        t1, t2 = best_us(a), best_us(b)
        out.append(f"{label:>6}  {what:<30} format 1 {t1:9.1f} µs  format 2 {t2:8.1f} µs  "
                   f"ratio {t2 / t1:5.3f}")
    # clmagic's own path: the whole entry file decoded (format 2), and the signature's check
    secret = Secret(b"team secret")
    sealed = Entry(seal(entry.meta, secret, binary), binary=binary)
    data = encode(sealed)
    t_dec = best_us(lambda: decode(data, key="a" * 64, fingerprint="b" * 16))
    t_sig = best_us(lambda: signed(sealed.meta, secret, binary))
    out.append(f"{label:>6}  clmagic decode (format 2, whole file) {t_dec:8.1f} µs; "
               f"signed() {t_sig:8.1f} µs")
    return out


def _key_rows() -> list[str]:
    """The cache key's hash over a 40 KB source and three 4 KB headers, with the NUL
    separators: SHA-256 (today's key) against BLAKE3."""
    parts = [os.urandom(40 << 10), b"-O3", b"dev", b"drv", b"2"] + [os.urandom(4 << 10)] * 3

    def run(make: Callable[[], object]) -> Callable[[], str]:
        def go() -> str:
            h = make()
            for p in parts:
                h.update(b"\0")  # type: ignore[attr-defined]
                h.update(p)  # type: ignore[attr-defined]
            return h.hexdigest()  # type: ignore[attr-defined,no-any-return]
        return go

    t1, t2 = best_us(run(hashlib.sha256)), best_us(run(blake3.blake3))
    return [f"key   40 KB source + 3 headers  SHA-256 {t1:7.1f} µs  BLAKE3 {t2:7.1f} µs  "
            f"ratio {t2 / t1:5.3f}"]


def _machine() -> list[str]:
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in
                   Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip()
    except OSError:
        commit = "?"
    return [f"machine: {cpu}, {os.cpu_count()} CPUs ({platform.machine()}, "
            f"{platform.system()} {platform.release()})",
            f"python {platform.python_version()}, {ssl.OPENSSL_VERSION}, xxhash "
            f"{xxhash.VERSION} (libxxhash {xxhash.XXHASH_VERSION}), blake3 {blake3.__version__}",
            f"commit {commit}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="also write the lines to this file")
    args = ap.parse_args()
    lines = _machine()
    for label, size in SIZES.items():
        lines += _rows(label, size)
    lines += _key_rows()
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
