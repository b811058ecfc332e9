"""Reclaim what a killed run left: a child cache whose owner process is gone is cleaned and ledgered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import contract, owner
from .cleanup import cleanup_child_cache
from .layout import _marker_ok, resolve_root
from .tree import _read_manifest


def reclaim_stale_children(root: str | Path, ledger_path: str | Path) -> list[dict[str, Any]]:
    """Clean (reason ``reclaimed``, ledgered) every child under a marked root whose manifest names an owner process
    on this host that is gone: what a SIGKILLed run left. Children of live runs, of other hosts, or without an owner
    record are left alone. An unmarked or missing root has nothing of ours to reclaim."""
    try:
        resolved = resolve_root(root)
    except contract.ToolError:
        return []
    if not resolved.is_dir() or not _marker_ok(resolved):
        return []
    entries = []
    for child in sorted(resolved.iterdir()):
        if child.is_symlink() or not child.is_dir():
            continue
        manifest = _read_manifest(child)
        if manifest is None or "owner" not in manifest or owner.alive(manifest["owner"]):
            continue
        entries.append(cleanup_child_cache(resolved, child.name, "reclaimed", ledger_path))
    return entries


def reclaim_for_run(root: str | Path, ledger_path: str | Path) -> list[dict[str, str]]:
    """reclaim_stale_children for a campaign about to start: one report warning per child it removed."""
    return [{"code": "cache.reclaimed", "message": f"removed {e['cache_dir']}, left by a run that died "
             f"(clean: {e['ok']})"} for e in reclaim_stale_children(root, ledger_path)]
