"""The sweep folder: the record of what each shard did, the only thing `status`, `run` (resume) and `merge` read.

    <folder>/sweep.json                 the mark that sweep_diffusion made the folder, with the spec it ran
    <folder>/shards/<id>/state.json     running | done | failed, with hash, attempt, host, pid, job id, reason
    <folder>/shards/<id>/attempt-<n>/   that attempt's bench output folder (never reused: a retry is a new one)
    <folder>/shards/<id>/attempt-<n>.stdout.json, .stderr.log   what the bench printed
    <folder>/shards/<id>/result.json    the finished attempt's bench-report.v1, its sha256 in state.json
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

from .. import contract, fileio, inputs, owner

MARK = "sweep.json"
STATE_FILE = "state.json"
STATUSES = ("done", "running", "failed", "pending")
STATE_SCHEMA, RESULT_SCHEMA = "sweep-shard-state.v1", "bench-report.v1"


def shard_dir(folder: Path, shard_id: str) -> Path:
    return folder / "shards" / shard_id


def attempt_dir(folder: Path, shard_id: str, attempt: int) -> Path:
    return shard_dir(folder, shard_id) / f"attempt-{attempt}"


def next_attempt(folder: Path, shard_id: str) -> int:
    taken = [int(m[1]) for p in shard_dir(folder, shard_id).glob("attempt-*")
             if (m := re.fullmatch(r"attempt-(\d+)(\..*)?", p.name))]
    return max(taken, default=0) + 1


def prepare(folder: Path, name: str, spec_document: dict[str, Any]) -> None:
    """Create (or take up again) a sweep folder; a non-empty folder without our mark is refused."""
    mark = folder / MARK
    if folder.exists() and any(folder.iterdir()) and not mark.is_file():
        raise contract.UsageError("sweep.folder_not_ours", f"{folder} is not empty and is not a sweep folder",
                                  "give --folder a new or empty directory, or one an earlier sweep made")
    if mark.is_file():
        try:
            earlier = inputs.load_json(mark, "sweep.folder_not_ours")
        except contract.InputError as exc:
            raise contract.UsageError("sweep.folder_not_ours", f"{folder} has a {MARK} that cannot be read: "
                                      f"{exc.message}", "use another --folder for this sweep") from None
        recorded = earlier.get("name") if isinstance(earlier, dict) else None
        if recorded != name:
            raise contract.UsageError("sweep.folder_not_ours", f"{folder} holds sweep {recorded!r}, "
                                      f"not {name!r}", "use another --folder for another sweep")
    try:
        (folder / "shards").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise contract.UsageError("usage.output_unwritable", f"cannot create {folder}: {exc.strerror or exc}",
                                  "choose a writable --folder") from None
    fileio.atomic_write_text(mark, json.dumps({"made_by": "sweep_diffusion", "name": name, "spec": spec_document},
                                              indent=1, sort_keys=True))


def _checked(path: Path, schema_id: str) -> tuple[dict[str, Any] | None, str | None]:
    """A document of the folder read through inputs and checked against its schema, or why it is not one."""
    try:
        document = inputs.load_json(path, "input.unreadable")
        contract.validate_input(document, schema_id, str(path))
    except contract.InputError as exc:
        return None, exc.message
    return document, None


def load_state(folder: Path, shard_id: str) -> tuple[dict[str, Any] | None, str | None]:
    """The shard's state.json checked against sweep-shard-state.v1, and what is wrong with it when it is damaged
    ``(None, problem)``; ``(None, None)`` when there is none yet."""
    path = shard_dir(folder, shard_id) / STATE_FILE
    if not path.exists() and not path.is_symlink():
        return None, None
    return _checked(path, STATE_SCHEMA)


def read_state(folder: Path, shard_id: str) -> dict[str, Any] | None:
    """The shard's checked state, or None when it has none or a damaged one."""
    return load_state(folder, shard_id)[0]


def load_result(folder: Path, shard_id: str, name: str = "result.json") -> tuple[dict[str, Any] | None, str | None]:
    """A bench report the shard's attempt wrote, checked against bench-report.v1, or why it is not one."""
    return _checked(shard_dir(folder, shard_id) / name, RESULT_SCHEMA)


def write_state(folder: Path, shard_id: str, state: dict[str, Any]) -> None:
    directory = shard_dir(folder, shard_id)
    directory.mkdir(parents=True, exist_ok=True)
    fileio.atomic_write_text(directory / STATE_FILE, json.dumps(state, indent=1, sort_keys=True))


def shard_status(folder: Path, shard_id: str, expected_hash: str) -> dict[str, Any]:
    """What the folder says about one shard: status, reason, attempt and the recorded state. A damaged state, or a
    result that is not a bench report, makes the shard failed with the reason (it runs again on resume)."""
    state, problem = load_state(folder, shard_id)
    if problem is not None:
        return {"status": "failed", "reason": f"its state.json is damaged ({problem[:300]}): it runs again",
                "attempts": 0, "state": None}
    if state is None:
        return {"status": "pending", "reason": None, "attempts": 0, "state": None}
    attempts, status, reason = state.get("attempt", 0), state["status"], state.get("reason")
    if status == "done":
        result = shard_dir(folder, shard_id) / "result.json"
        if state.get("hash") != expected_hash:
            status, reason = "pending", "its settings changed since it ran (hash differs): it runs again"
        elif "sha256:" + (fileio.sha256_file_or_none(result) or "unreadable") != state.get("result_sha256"):
            status, reason = "pending", "its result file is missing or altered: it runs again"
        elif (damage := load_result(folder, shard_id)[1]) is not None:
            status, reason = "failed", f"its result is not a valid bench report ({damage[:300]}): it runs again"
    elif (status == "running" and state.get("host") == socket.gethostname()
          and not owner.pid_alive(state.get("pid", 0))):
        status = "failed"
        reason = f"killed: its worker (pid {state.get('pid')}) is gone without writing a result"
    return {"status": status, "reason": reason, "attempts": attempts, "state": state}


def mark_failed(folder: Path, shard_id: str, reason: str) -> None:
    """An executor's word that a shard it ran ended without a result (cancelled, lost node): failed, with why."""
    state = read_state(folder, shard_id) or {"attempt": 0}
    if state.get("status") in (None, "running", "pending"):
        write_state(folder, shard_id, {**state, "status": "failed", "reason": reason,
                                       "finished_at": contract.utc_now()})
