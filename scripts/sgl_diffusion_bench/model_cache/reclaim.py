"""What happens to a run's child when the run ends (cleaned, or handed to the user) or dies (reclaimed by a later
run), and the ledger line for every child a reclaim looked at and kept. The rules are in ownership.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from .. import contract, fileio
from .cleanup import cleanup_child_cache
from .layout import MANIFEST_NAME, marker_ok, resolve_root
from .ledger import append_to_ledger, owner_field
from .ownership import dead_run_lock, handed_to_user
from .prepare import PreparedCache
from .tree import read_manifest


@dataclasses.dataclass(frozen=True)
class Reclaim:
    """The children a reclaim removed (their finished ledger lines) and those it kept (their kept lines)."""

    cleaned: tuple[dict[str, Any], ...]
    kept: tuple[dict[str, Any], ...]


def kept_entry(root: Path, child: Path, manifest: dict[str, Any] | None, why: str, *,
               cleanup_asked: bool) -> dict[str, Any]:
    """The ledger line of a child left in place: who holds it and why. ``ok`` is false only when a cleanup of this
    very child was asked for (the run's own ``--cleanup-model-cache``) and could not be done."""
    manifest = manifest or {}
    return contract.envelope(
        "cleanup-ledger.v1", "cleanup_model_cache", ok=not cleanup_asked, phase="kept", kept_reason=why,
        model=str(manifest.get("model", "")), label=str(manifest.get("label", "")),
        exit_reason="success" if not cleanup_asked else "error", root=str(root), cache_dir=str(child),
        **owner_field(manifest))


def reclaim_stale_children(root: str | Path, ledger_path: str | Path) -> Reclaim:
    """Clean (reason ``reclaimed``, ledgered) every child under a marked root whose run provably died: its lock is
    free and its recorded process gone. A live run's child is skipped; every other child (the user's, another host's,
    one holding files its run did not create, one without a recognisable owner) is kept with a ledger line saying
    why. An unmarked or missing root has nothing of ours to reclaim."""
    try:
        resolved = resolve_root(root)
    except contract.ToolError:
        return Reclaim((), ())
    if not resolved.is_dir() or not marker_ok(resolved):
        return Reclaim((), ())
    cleaned, kept = [], []
    for child in sorted(resolved.iterdir()):
        if child.is_symlink() or not child.is_dir():
            continue
        manifest = read_manifest(child)
        if manifest is None:
            continue  # not one of our children: never touched, nothing to say
        with dead_run_lock(child, manifest) as why:
            if why is None:
                try:
                    cleaned.append(cleanup_child_cache(resolved, child.name, "reclaimed", ledger_path,
                                                       only_run_files=True))
                    continue
                except contract.PreconditionError as exc:
                    if exc.code != "cache.foreign_files":
                        raise
                    why = f"{exc.code}: {exc.message}"
        if why:
            kept.append(kept_entry(resolved, child, manifest, why, cleanup_asked=False))
            append_to_ledger(ledger_path, kept[-1])
    return Reclaim(tuple(cleaned), tuple(kept))


def reclaim_for_run(root: str | Path, ledger_path: str | Path) -> list[dict[str, str]]:
    """reclaim_stale_children for a campaign about to start: a report warning per child it removed, and one for each
    child that looked abandoned but was kept because it holds files its run did not create."""
    result = reclaim_stale_children(root, ledger_path)
    warnings = [{"code": "cache.reclaimed", "message": f"removed {e['cache_dir']}, left by a run that died "
                 f"(clean: {e['ok']})"} for e in result.cleaned]
    return warnings + [{"code": "cache.kept", "message": f"kept {e['cache_dir']}: {e['kept_reason']}"}
                       for e in result.kept if e["kept_reason"].startswith("cache.foreign_files")]


def finish_run_child(prepared: PreparedCache, *, cleanup: bool, reason: str, ledger_path: str | Path,
                     model: str, label: str) -> dict[str, Any] | None:
    """The end of the run that holds ``prepared``: clean it (only what the run created; ledgered) when asked, else
    hand it to the user so no later run reclaims it; then release the run's lock. Returns the ledger line written,
    None when the child was handed over."""
    try:
        if not cleanup:
            _hand_over(prepared)
            return None
        try:
            return cleanup_child_cache(prepared.root, prepared.child, reason, ledger_path, model, label,
                                       only_run_files=True)
        except contract.PreconditionError as exc:
            if exc.code != "cache.foreign_files":
                raise
            _hand_over(prepared)
            entry = kept_entry(prepared.root, prepared.child, read_manifest(prepared.child),
                               f"{exc.code}: {exc.message}", cleanup_asked=True)
            append_to_ledger(ledger_path, entry)
            return entry
    finally:
        if prepared.lock is not None:
            prepared.lock.release()


def _hand_over(prepared: PreparedCache) -> None:
    manifest = read_manifest(prepared.child)
    if manifest is None or not isinstance(manifest.get("owner"), dict) or manifest["owner"].get("kind") != "run":
        return
    manifest["owner"] = handed_to_user(manifest["owner"])
    fileio.atomic_write_text(prepared.child / MANIFEST_NAME, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
