"""Who holds a child cache, and when a later run may take it back.

Two holders. A **run** (a benchmark campaign) holds an exclusive ``flock`` on ``<child>/LOCK_NAME`` from before its
manifest is written until it cleans the child or hands it over; the kernel drops that lock when the process dies,
however it dies, so "the lock can be taken and the recorded process is gone" proves the run died. The **user** holds a
child made by ``cleanup_model_cache.py prepare`` (the command that made it exits at once: its pid says nothing), and
a run that ends without ``--cleanup-model-cache`` hands its child to the user. A user's child is never reclaimed: only
an explicit ``cleanup --child`` releases it.

A reclaim also never deletes what the run did not create: a top-level entry outside the layout a run writes, or a
file of another user, stops that child's cleanup (``cache.foreign_files``) and the child stays, ledgered.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat
from pathlib import Path
from typing import Any, Iterator

from .. import contract, owner
from .layout import MANIFEST_NAME

LOCK_NAME = ".sglang-diffusion-benchmark-child.lock"
HOLDERS = ("run", "user")
# What a run writes at the top of its child: the manifest, the lock, and the cache_environment() directories.
RUN_LAYOUT = frozenset({MANIFEST_NAME, LOCK_NAME, "huggingface", "modelscope", "sgl_diffusion", "torch", "xdg-cache",
                        "jit"})
FOREIGN_SAMPLE = 5
_LOCK_OPEN = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class RunLock:
    """The run's hold on its child: an open descriptor with an exclusive flock, released once."""

    def __init__(self, path: Path, fd: int):
        self.path, self._fd = path, fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def take_run_lock(child: Path) -> RunLock:
    """Create the child's lock file and hold it; called before the manifest is written, so no reclaim can ever see
    a run's manifest without its lock held."""
    fd = os.open(child / LOCK_NAME, _LOCK_OPEN | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return RunLock(child / LOCK_NAME, fd)


def holder_record(held_by: str) -> dict[str, Any]:
    """The manifest's ``owner``: for a run, its process (pid, start time, host) and its lock; for the user, who."""
    if held_by == "run":
        return {"kind": "run", **owner.record(), "uid": os.getuid(), "lock": LOCK_NAME}
    return {"kind": "user", "host": socket.gethostname(), "uid": os.getuid()}


def handed_to_user(run_owner: dict[str, Any]) -> dict[str, Any]:
    """The owner record of a run's child the run finished with and left in place on purpose."""
    return {**holder_record("user"), "handed_over_by_run": {k: run_owner.get(k) for k in ("pid", "host")}}


@contextlib.contextmanager
def dead_run_lock(child: Path, manifest: dict[str, Any] | None) -> Iterator[str | None]:
    """Yield None (holding the dead run's lock, so no other reclaim races us) when the child belongs to a run that
    provably died; otherwise yield why it is kept, or "" for a live run's child (in use: nothing to say)."""
    record = (manifest or {}).get("owner")
    if not isinstance(record, dict) or record.get("kind") not in HOLDERS:
        yield ("its owner is not recorded the way this tool records it (made by an older version?): only "
               "'cleanup_model_cache.py cleanup --child' releases it")
        return
    if record["kind"] == "user":
        yield ("held by the user (made by 'prepare', or kept by a run without --cleanup-model-cache): only "
               "'cleanup_model_cache.py cleanup --child' releases it")
        return
    if record.get("host") != socket.gethostname():
        yield f"held by a run on host {record.get('host')!r}: whether it is alive cannot be seen from here"
        return
    try:
        fd = os.open(child / LOCK_NAME, _LOCK_OPEN)
    except OSError as exc:
        yield f"its run's lock {LOCK_NAME} cannot be opened ({exc.strerror}): the run's death is not provable"
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            yield f"its run's lock {LOCK_NAME} is not a regular file: the run's death is not provable"
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield ""  # a live run holds it
            return
        if owner.alive(record):
            yield "its lock is free but its recorded process still runs: the run's death is not provable"
            return
        yield None
    finally:
        os.close(fd)


def check_run_files(child: Path, entries: Any, run_uid: Any) -> None:
    """Refuse (``cache.foreign_files``, nothing deleted) when the child holds what a run does not create: a top-level
    entry outside RUN_LAYOUT, or any entry owned by another uid than the run's."""
    foreign = sorted(p.name for p in child.iterdir() if p.name not in RUN_LAYOUT)
    if isinstance(run_uid, int):
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                if os.lstat(entry.path).st_uid != run_uid:
                    foreign.append(os.path.relpath(entry.path, child))
    if foreign:
        raise contract.PreconditionError(
            "cache.foreign_files",
            f"{child} holds {len(foreign)} entr{'y' if len(foreign) == 1 else 'ies'} its run did not create: "
            + ", ".join(foreign[:FOREIGN_SAMPLE]) + (", ..." if len(foreign) > FOREIGN_SAMPLE else ""),
            "nothing was deleted; move those out, then release the child with 'cleanup_model_cache.py cleanup "
            f"--root {child.parent} --child {child.name} --reason success --ledger FILE'")
