"""Re-check a cleanup ledger now: every cleaned child must still be gone (or re-created by a later prepare)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .. import contract, inputs
from .layout import marker_ok
from .tree import compute_stats, created_at, read_manifest, walk_tree


def verify_ledger(ledger_path: str | Path) -> dict[str, Any]:
    """Re-check every ledger entry now: its cache_dir must be absent (or re-created by a later prepare)."""
    ledger = Path(ledger_path)
    if not ledger.exists():
        raise contract.PreconditionError("cache.ledger_missing", f"ledger {ledger} does not exist",
                                         "pass the --ledger file the cleanup wrote")
    entries = []
    for number, line in enumerate(_ledger_lines(ledger), start=1):
        if not line.strip():
            continue
        try:
            entry = inputs.parse_json(line, f"{ledger}:{number}", "cache.ledger_unreadable")
        except contract.InputError as exc:
            raise contract.InputError("cache.ledger_unreadable", exc.message,
                                      "the ledger is append-only JSONL; restore the line or move it aside") from None
        contract.validate_input(entry, "cleanup-ledger.v1", f"{ledger}:{number}")
        entries.append((number, entry))
    finished = {e.get("cleanup_id") for _, e in entries if e.get("phase", "finished") == "finished"}
    # A started line stands for itself only when its cleanup never wrote a finished line (a killed cleanup).
    standing = [(n, e) for n, e in entries if e.get("phase") != "started" or e.get("cleanup_id") not in finished]
    results = [_kept(n, e) if e.get("phase") == "kept" else _verify_entry(n, e) for n, e in standing]
    if not results:
        raise contract.PreconditionError("cache.ledger_empty", f"ledger {ledger} has no entries",
                                         "run 'cleanup' first; an empty ledger proves nothing")
    residue = [r for r in results if r["status"] == "present"]
    return {"entries": results, "entry_count": len(results), "residue_count": len(residue),
            "recorded_failures": sum(not r["recorded_ok"] for r in results)}


def _kept(number: int, entry: dict[str, Any]) -> dict[str, Any]:
    """A child the tool left in place on purpose: nothing was deleted, so there is no absence to check; what it holds
    now is measured."""
    cache_dir = Path(entry["cache_dir"])
    present = cache_dir.is_dir() and not cache_dir.is_symlink()
    return {"line": number, "cache_dir": str(cache_dir), "model": entry["model"], "label": entry["label"],
            "exit_reason": None, "recorded_ok": entry["ok"], "status": "kept", "kept_reason": entry["kept_reason"],
            "residual": compute_stats(cache_dir, walk_tree(cache_dir) if present else [])}


def _verify_entry(number: int, entry: dict[str, Any]) -> dict[str, Any]:
    cache_dir = Path(entry["cache_dir"])
    result = {"line": number, "cache_dir": str(cache_dir), "model": entry["model"], "label": entry["label"],
              "exit_reason": entry["exit_reason"], "recorded_ok": entry["ok"], "status": "absent",
              "residual": compute_stats(cache_dir, [])}
    if not os.path.lexists(cache_dir):
        return result
    manifest = read_manifest(cache_dir) if cache_dir.is_dir() and not cache_dir.is_symlink() else None
    made = created_at(manifest)
    if made is not None and made > entry["cleaned_at_unix_s"]:
        result["status"] = "recreated_after_cleanup"
        return result
    result["status"] = "present"
    if cache_dir.is_dir() and not cache_dir.is_symlink():
        if cache_dir.parent == cache_dir or not marker_ok(cache_dir.parent):
            raise contract.InputError(
                "cache.ledger_unreadable", f"line {number}: cache_dir {cache_dir} is present and not a child of a "
                "marked cache root: not a folder cleanup made, so verify does not walk it",
                "the ledger is append-only JSONL written by cleanup; restore the line or move it aside")
        result["residual"] = compute_stats(cache_dir, walk_tree(cache_dir))
    return result



def _ledger_lines(ledger: Path) -> list[str]:
    return inputs.read_text(ledger, "cache.ledger_unreadable").splitlines()
