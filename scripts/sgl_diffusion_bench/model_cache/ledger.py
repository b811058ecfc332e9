"""The cleanup ledger (JSONL, append-only): opened before anything is deleted, one validated line at a time."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from .. import contract


def append_to_ledger(ledger_path: str | Path, entry: dict[str, Any]) -> None:
    """One validated line appended to the ledger (a child kept, and why)."""
    fd = open_ledger(Path(ledger_path).expanduser().resolve())
    try:
        write_line(fd, entry)
    finally:
        os.close(fd)


def owner_field(manifest: dict[str, Any] | None) -> dict[str, Any]:
    """The ledger's ``owner`` (who held the child, from its manifest), or nothing when the manifest has none."""
    record = (manifest or {}).get("owner")
    return {"owner": record} if isinstance(record, dict) and record.get("kind") in ("run", "user") else {}


def check_ledger(ledger_path: str | Path) -> None:
    """Refuse now (cache.ledger_unwritable) if a cleanup could not write its ledger later."""
    os.close(open_ledger(Path(ledger_path).expanduser().resolve()))


def open_ledger(ledger: Path) -> int:
    """The ledger opened for appending before anything is deleted; a ledger that cannot be written refuses."""
    try:
        ledger.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise contract.PreconditionError(
            "cache.ledger_unwritable", f"ledger {ledger} cannot be opened for appending: {exc.strerror}",
            "nothing was deleted; pass a --ledger in a writable directory") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise contract.PreconditionError("cache.ledger_unwritable", f"ledger {ledger} is not a regular file",
                                         "nothing was deleted; pass a --ledger that is a regular file")
    return fd


def write_line(fd: int, entry: dict[str, Any]) -> None:
    contract.check_document(entry)
    data = (json.dumps(entry, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
    while data:
        data = data[os.write(fd, data):]
    os.fsync(fd)

