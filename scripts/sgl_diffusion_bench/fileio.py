"""File primitives every module shares: opening a regular file only, a streamed sha256 (and one of bytes), an atomic
write and the free space of a path.

One copy of each, so a 340 MB trace is never read into memory to be hashed, a reader never sees half a file, and no
reader blocks on a FIFO or reads /dev/zero forever.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from pathlib import Path

HASH_CHUNK_BYTES = 1 << 20


class NotRegularFileError(OSError):
    """A path that is a directory, FIFO, socket or device where a file's content is wanted."""


def open_regular_fd(path: str | Path) -> tuple[int, os.stat_result]:
    """A blocking read-only fd on ``path`` and its stat, once it is known to be a regular file. The open itself never
    blocks (O_NONBLOCK: a FIFO without a writer), and nothing is read before the check. Raises OSError
    (NotRegularFileError for anything but a regular file); every reader of the package opens its inputs here."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegularFileError(errno.EINVAL, "not a regular file (a directory, pipe, socket or device)", str(path))
    os.set_blocking(fd, True)
    return fd, st


def sha256_file(path: str | Path) -> str:
    """The regular file's sha256, read in 1 MiB chunks. Raises OSError, also for a regular file that refuses reads
    (/proc/self/mem): a caller hashing a folder it did not just write decides what an unreadable file means."""
    digest = hashlib.sha256()
    with os.fdopen(open_regular_fd(path)[0], "rb") as handle:
        for chunk in iter(lambda: handle.read(HASH_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_file_or_none(path: str | Path) -> str | None:
    """The file's sha256, or None when it is missing, not a regular file or cannot be read: for checking a folder
    whose files anyone may have replaced, where an unreadable file is as good as an altered one."""
    try:
        return sha256_file(path)
    except OSError:
        return None


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
