"""The folder's record, ``evidence.json`` (evidence.v1): the request and its hash, the machine, every step with its
status, timing, files (path relative to the folder, sha256, bytes) and the command that reproduces it. Written
atomically after every change, so an interrupted run leaves a manifest that says which step it stopped in."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from .. import contract, fileio, inputs

NAME = "evidence.json"
MANIFEST_SCHEMA = "evidence.v1"
TOOL = "collect_pr_evidence"
STEPS = ("readiness", "campaign", "output_identity", "profile", "trace_analysis", "bcg_replay", "cleanup")
FINISHED = ("done", "skipped")  # a step in one of these states is kept on resume when its files still hash


def file_record(root: Path, path: Path) -> dict[str, Any]:
    return {"path": path.relative_to(root).as_posix(), "sha256": fileio.sha256_file(path),
            "bytes": path.stat().st_size}


def records_under(root: Path, folder: Path) -> list[dict[str, Any]]:
    """Every plain file below ``folder``, hashed, sorted by path."""
    if not folder.exists():
        return []
    return [file_record(root, p) for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()]


def new_step(name: str) -> dict[str, Any]:
    return {"name": name, "status": "pending", "attempts": 0, "started_at": None, "finished_at": None,
            "wall_s": None, "reason": None, "document": None, "command": None, "files": [], "result": None}


def new_manifest(root: Path, request: Mapping[str, Any], request_sha256: str) -> dict[str, Any]:
    doc = contract.envelope(MANIFEST_SCHEMA, TOOL, ok=False, state="running", out_dir=str(root), request=dict(request),
                            request_sha256=request_sha256, versions={}, machine={}, layout={},
                            steps=[new_step(n) for n in STEPS], rendered=[], interrupted_step=None)
    return doc


def load(root: Path) -> dict[str, Any] | None:
    """The folder's manifest, or None when it has none; one that does not parse or validate is refused."""
    path = root / NAME
    if not path.exists():
        return None
    try:
        doc = inputs.load_json(path, "evidence.manifest_unreadable")
    except contract.InputError as exc:
        raise contract.InputError("evidence.manifest_unreadable", f"{path} cannot be read: {exc.message}",
                                  "restore it, or choose a new --out") from None
    errors = contract.validation_errors(doc, MANIFEST_SCHEMA) if isinstance(doc, dict) else ["not an object"]
    if errors:
        raise contract.InputError("evidence.manifest_unreadable", f"{path} is not an evidence.v1 document: "
                                  f"{errors[0]}", "restore it, or choose a new --out")
    return doc


def save(root: Path, doc: dict[str, Any]) -> None:
    contract.check_document(doc)
    fileio.atomic_write_text(root / NAME, contract.dumps(doc) + "\n")


def step(doc: Mapping[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in doc["steps"] if s["name"] == name)


def stale_files(root: Path, records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The recorded files that are missing or no longer hash as recorded."""
    stale = []
    for rec in records:
        path = root / rec["path"]
        if fileio.sha256_file_or_none(path) != rec["sha256"]:
            stale.append(rec["path"])
    return stale


def recorded_paths(doc: Mapping[str, Any]) -> set[str]:
    return {f["path"] for s in doc["steps"] for f in s["files"]} | {f["path"] for f in doc["rendered"]}
