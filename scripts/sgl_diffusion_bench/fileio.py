"""File primitives every module shares: a streamed sha256 (and one of bytes), an atomic write and the free space of a
path.

One copy of each, so a 340 MB trace is never read into memory to be hashed and a reader never sees half a file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

HASH_CHUNK_BYTES = 1 << 20


def sha256_file(path: str | Path) -> str:
    """The file's sha256, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(HASH_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    """The sha256 of bytes already in memory (a cache key, a small document)."""
    return hashlib.sha256(data).hexdigest()


def atomic_write_text(path: Path, text: str) -> Path:
    """Write ``text`` to a sibling temp file, then rename it over ``path``: readers see the old or the new file.

    The temp name carries the pid, so two processes writing the same path never share a temp file.
    """
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def free_bytes(path: Path) -> int | None:
    """Free bytes on the disk that holds ``path``, or of its nearest existing parent (None if none exists)."""
    for candidate in [path, *path.parents]:
        if candidate.exists():
            return shutil.disk_usage(candidate).free
    return None
