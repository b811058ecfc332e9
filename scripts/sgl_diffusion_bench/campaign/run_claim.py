"""A campaign claims its report name atomically before anything runs, so two campaigns on one label can never
overwrite each other's report or run directories.

The claim is ``<report file name>.claim`` beside the report, created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and held
under ``flock`` for the life of the process. A second campaign on the same label finds the lock held (a live owner:
``run.label_in_use``) or the claim marked started, a report or run directories (``run.label_taken``), both exit 3
before anything runs. A claim whose owner died before starting (a refusal, a kill during set-up) is taken over.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from pathlib import Path
from typing import Any, Iterable

from .. import contract, owner

CLAIM_SUFFIX = ".claim"


class RunClaim:
    """An open, locked claim file; ``mark_started`` records that cells began (the label is then used for good)."""

    def __init__(self, path: Path, fd: int, document: dict[str, Any]):
        self.path, self.fd, self.document = path, fd, document

    def write(self) -> None:
        """The document, in place of what the claim file held (the lock stays held)."""
        data = json.dumps(self.document, sort_keys=True).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)
        os.fsync(self.fd)

    def mark_started(self) -> None:
        self.document["state"] = "started"
        self.write()

    def release(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)


def claim_path(report_path: Path) -> Path:
    return report_path.with_name(report_path.name + CLAIM_SUFFIX)


def claim_run(report_path: Path, label: str, taken: Iterable[Path] = ()) -> RunClaim:
    """Claim ``report_path``'s name for this process, or raise PreconditionError (nothing has run yet)."""
    path = claim_path(Path(report_path))
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    created = True
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        created = False
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            raise _taken(label, path, f"its claim {path} cannot be opened ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _taken(label, path, f"{path} is not a regular file")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        previous = _read(fd)
        os.close(fd)
        raise contract.PreconditionError(
            "run.label_in_use", f"label {label!r} is in use by a running campaign ({path}: {previous.get('owner')})",
            "choose another --label (or --output-dir); a running campaign's report is never overwritten",
            details={"claim": str(path), "owner": previous.get("owner")}) from None
    if not created:
        previous = _read(fd)
        existing = [str(p) for p in taken if os.path.lexists(p)]
        if previous.get("state") != "claimed" or existing:
            os.close(fd)
            raise _taken(label, path, existing[0] if existing else f"{path} (a campaign that started)")
    document = {"label": label,
                "report_path": str(report_path), "state": "claimed", "owner": owner.record(),
                "claimed_at": contract.utc_now()}
    claim = RunClaim(path, fd, document)
    claim.write()
    return claim


def _read(fd: int) -> dict[str, Any]:
    try:
        value = json.loads(os.pread(fd, 65536, 0).decode("utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _taken(label: str, path: Path, what: str) -> contract.PreconditionError:
    return contract.PreconditionError(
        "run.label_taken", f"label {label!r} was already used here: {what}",
        "choose a new --label (or another --output-dir); earlier results are never overwritten",
        details={"claim": str(path)})
