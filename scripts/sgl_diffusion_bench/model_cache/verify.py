"""Re-check a cleanup ledger now: every cleaned child must still be gone (or re-created by a later prepare)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .. import contract
from .tree import _read_manifest, compute_stats, walk_tree


def verify_ledger(ledger_path: str | Path) -> dict[str, Any]:
    """Re-check every ledger entry now: its cache_dir must be absent (or re-created by a later prepare)."""
    ledger = Path(ledger_path)
    if not ledger.is_file():
        raise contract.PreconditionError("cache.ledger_missing", f"ledger {ledger} does not exist",
                                         "pass the --ledger file the cleanup wrote")
    results = []
    for number, line in enumerate(ledger.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise contract.InputError("cache.ledger_unreadable", f"{ledger}:{number} is not JSON: {exc}",
                                      "the ledger is append-only JSONL; restore the line or move it aside") from None
        contract.validate_input(entry, "cleanup-ledger.v1", f"{ledger}:{number}")
        results.append(_verify_entry(number, entry))
    if not results:
        raise contract.PreconditionError("cache.ledger_empty", f"ledger {ledger} has no entries",
                                         "run 'cleanup' first; an empty ledger proves nothing")
    residue = [r for r in results if r["status"] == "present"]
    return {"entries": results, "entry_count": len(results), "residue_count": len(residue),
            "recorded_failures": sum(not r["recorded_ok"] for r in results)}


def _verify_entry(number: int, entry: dict[str, Any]) -> dict[str, Any]:
    cache_dir = Path(entry["cache_dir"])
    result = {"line": number, "cache_dir": str(cache_dir), "model": entry["model"], "label": entry["label"],
              "exit_reason": entry["exit_reason"], "recorded_ok": entry["ok"], "status": "absent",
              "residual": compute_stats(cache_dir, [])}
    if not os.path.lexists(cache_dir):
        return result
    manifest = _read_manifest(cache_dir) if cache_dir.is_dir() and not cache_dir.is_symlink() else None
    if manifest and float(manifest.get("created_at_unix_s", 0)) > entry["cleaned_at_unix_s"]:
        result["status"] = "recreated_after_cleanup"
        return result
    result["status"] = "present"
    if cache_dir.is_dir() and not cache_dir.is_symlink():
        result["residual"] = compute_stats(cache_dir, walk_tree(cache_dir))
    return result

