"""Cleanup of one child cache whose "nothing left" claim comes from an independent re-scan."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import time
from pathlib import Path
from typing import Any, Callable

from .. import contract
from .layout import MANIFEST_NAME, MARKER_NAME, _marker_ok, resolve_root
from .tree import TreeEntry, _read_manifest, compute_stats, fingerprint_tree, hf_scan, walk_tree

RESIDUAL_SAMPLE_LIMIT = 50
EXIT_REASONS = ("success", "error", "interrupted")

Remover = Callable[[Path, str], None]


@dataclasses.dataclass(frozen=True)
class CleanupPlan:
    """Everything cleanup will remove, measured before anything is touched."""

    root: Path
    child: Path
    manifest: dict[str, Any] | None
    entries: tuple[TreeEntry, ...]
    before: dict[str, int]
    hf_scan: dict[str, Any] | None
    outside_targets: tuple[tuple[str, str, tuple[int, int, int] | None], ...]  # (link, target, (ino, size, mtime))

    def removal_order(self) -> list[TreeEntry]:
        """Links first (never a pointer to a missing blob), then files (manifest last), then dirs deepest-first."""
        links = [e for e in self.entries if e.kind == "link"]
        files = sorted((e for e in self.entries if e.kind in ("file", "other")),
                       key=lambda e: e.path == self.child / MANIFEST_NAME)
        dirs = sorted((e for e in self.entries if e.kind == "dir"), key=lambda e: -len(e.path.parts))
        return links + files + dirs + [TreeEntry(self.child, "dir", 0)]

    def as_dict(self) -> dict[str, Any]:
        return {"entry_count": len(self.entries), "before": self.before, "hf_scan": self.hf_scan,
                "outside_link_count": len(self.outside_targets)}



def _resolve_child(root: str | Path, child: str | Path) -> tuple[Path, Path]:
    resolved_root = resolve_root(root)
    if not _marker_ok(resolved_root):
        raise contract.PreconditionError(
            "cache.root_not_marked", f"{resolved_root} has no {MARKER_NAME} ownership marker",
            "only roots created by 'cleanup_model_cache.py prepare' can be cleaned; nothing was deleted")
    given = Path(child)
    candidate = given if given.is_absolute() else resolved_root / given
    if candidate.parent.resolve() != resolved_root or candidate.name in ("", ".", ".."):
        raise contract.UsageError("cache.child_outside_root", f"{child} is not a direct child of {resolved_root}",
                                  "pass the child's name as printed by prepare (its 'child' field)")
    candidate = resolved_root / candidate.name
    try:
        st = candidate.lstat()
    except FileNotFoundError:
        raise contract.PreconditionError("cache.child_missing", f"child cache {candidate} does not exist",
                                         "check --child; 'verify --ledger FILE' shows earlier cleanups") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise contract.UsageError("cache.child_not_directory", f"{candidate} is a symlink or not a directory",
                                  "nothing was deleted; a child cache is always a real directory")
    return resolved_root, candidate


def plan_cleanup(root: str | Path, child: str | Path) -> CleanupPlan:
    """Check ownership and measure the child; touches nothing."""
    resolved_root, child_path = _resolve_child(root, child)
    entries = tuple(walk_tree(child_path))
    manifest = _read_manifest(child_path)
    if manifest is None and any(e.kind != "dir" for e in entries):
        raise contract.PreconditionError(
            "cache.child_not_ours", f"{child_path} holds files but no {MANIFEST_NAME}: not a generated child",
            "nothing was deleted; only children made by 'prepare' are removed")
    outside = []
    inside = str(child_path) + os.sep
    for e in entries:
        if e.kind == "link" and not (e.link_target or "").startswith(inside):
            outside.append((str(e.path), e.link_target or "", _signature(Path(e.link_target or ""))))
    return CleanupPlan(resolved_root, child_path, manifest, entries, compute_stats(child_path, entries),
                       hf_scan(child_path / "huggingface" / "hub"), tuple(outside))


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def remove_entry(path: Path, kind: str) -> None:
    """Delete one entry without following links: unlink files and links, rmdir (empty) directories."""
    if kind == "dir":
        os.rmdir(path)
    else:
        os.unlink(path)


def execute_cleanup(plan: CleanupPlan, remove: Remover = remove_entry) -> dict[str, Any]:
    """Remove the planned entries; a path whose ancestors below the child are not all real directories is skipped.

    KeyboardInterrupt propagates with ``interrupted`` set in the exception's ``outcome`` attribute.
    """
    outcome: dict[str, Any] = {"planned_entry_count": len(plan.entries) + 1, "removed_count": 0,
                               "already_absent_count": 0, "failures": [], "interrupted": False}
    try:
        for entry in plan.removal_order():
            try:
                st = os.lstat(entry.path)
            except FileNotFoundError:
                outcome["already_absent_count"] += 1
                continue
            if not _ancestors_are_real_dirs(plan.child, entry.path):
                outcome["failures"].append({"path": str(entry.path), "error": "a symlink appeared on the path"})
                continue
            kind = "link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "file"
            try:
                remove(entry.path, kind)
                outcome["removed_count"] += 1
            except OSError as exc:
                outcome["failures"].append({"path": str(entry.path), "error": f"{type(exc).__name__}: {exc.strerror}"})
    except KeyboardInterrupt as exc:
        outcome["interrupted"] = True
        exc.outcome = outcome  # type: ignore[attr-defined]
        raise
    return outcome


def _ancestors_are_real_dirs(child: Path, path: Path) -> bool:
    current = path.parent
    while current != child.parent:
        if not stat.S_ISDIR(os.lstat(current).st_mode):
            return False
        if current == child:
            return True
        current = current.parent
    return path == child


def rescan_residual(plan: CleanupPlan) -> tuple[dict[str, Any], dict[str, int]]:
    """The independent check: list the root afresh, lstat the child and every former entry, walk what remains,
    and re-lstat each outside target a link pointed at. Returns (residual evidence, after-stats)."""
    listed = set(os.listdir(plan.root))
    try:
        os.lstat(plan.child)
        child_present = True
    except FileNotFoundError:
        child_present = False
    present = [str(e.path) for e in plan.entries if os.path.lexists(e.path)]
    after = compute_stats(plan.child, walk_tree(plan.child)) if child_present else compute_stats(plan.child, [])
    changed = [link for link, target, sig in plan.outside_targets if _signature(Path(target)) != sig]
    residual = {
        "child_present": child_present, "child_listed_in_root": plan.child.name in listed,
        "root_entry_count": len(listed), "former_entries_checked": len(plan.entries),
        "former_entries_present": len(present), "present_paths": present[:RESIDUAL_SAMPLE_LIMIT],
        "outside_targets_checked": len(plan.outside_targets), "outside_targets_changed": changed[:RESIDUAL_SAMPLE_LIMIT],
    }
    residual["clean"] = not (child_present or residual["child_listed_in_root"] or present or changed)
    return residual, after


def _seed_checks(manifest: dict[str, Any] | None) -> list[dict[str, Any]]:
    checks = []
    for seed in (manifest or {}).get("seed_caches", []):
        hub = Path(seed.get("hub", ""))
        now = fingerprint_tree(hub) if hub.is_dir() else None
        checks.append({"hub": str(hub), "fingerprint_before": seed.get("fingerprint"), "fingerprint_after": now,
                       "unchanged": now is not None and now == seed.get("fingerprint")})
    return checks


def cleanup_child_cache(root: str | Path, child: str | Path, reason: str, ledger_path: str | Path,
                        model: str | None = None, label: str | None = None, *,
                        remove: Remover = remove_entry) -> dict[str, Any]:
    """Plan, delete, re-scan independently, and append one cleanup-ledger.v1 line; returns that entry.

    ``entry["ok"]`` is false when anything remains, a deletion failed, a link's outside target changed, or a seed
    cache's fingerprint moved. On KeyboardInterrupt the entry (marked interrupted) is still written, then re-raised.
    """
    if reason not in EXIT_REASONS:
        raise contract.UsageError("cache.bad_reason", f"reason {reason!r} is not one of {EXIT_REASONS}",
                                  "pass --reason success, error or interrupted")
    plan = plan_cleanup(root, child)
    ledger = Path(ledger_path).expanduser().resolve()
    if ledger.is_relative_to(plan.child):
        raise contract.UsageError("cache.ledger_inside_child", f"ledger {ledger} is inside the child being deleted",
                                  "write the ledger next to the benchmark outputs, outside --root's children")
    manifest = plan.manifest or {}
    model = model if model is not None else manifest.get("model", "")
    label = label if label is not None else manifest.get("label", "")
    try:
        deletion = execute_cleanup(plan, remove)
    except KeyboardInterrupt as exc:
        _append_ledger(ledger, _ledger_entry(plan, getattr(exc, "outcome", {}), reason, model, label))
        raise
    entry = _ledger_entry(plan, deletion, reason, model, label)
    _append_ledger(ledger, entry)
    return entry


def _ledger_entry(plan: CleanupPlan, deletion: dict[str, Any], reason: str, model: str, label: str) -> dict[str, Any]:
    deletion = {"planned_entry_count": len(plan.entries) + 1, "removed_count": 0, "already_absent_count": 0,
                "failures": [], "interrupted": True, **deletion}
    residual, after = rescan_residual(plan)
    seeds = _seed_checks(plan.manifest)
    ok = (residual["clean"] and not deletion["failures"] and not deletion["interrupted"]
          and all(s["unchanged"] for s in seeds))
    return contract.envelope(
        "cleanup-ledger.v1", "cleanup_model_cache", ok=ok, model=model, label=label, exit_reason=reason,
        root=str(plan.root), cache_dir=str(plan.child), cleaned_at_unix_s=round(time.time(), 3),
        before=plan.before, after=after, hf_scan_before=plan.hf_scan,
        hf_scan_after=hf_scan(plan.child / "huggingface" / "hub"),
        deletion={**deletion, "failures": deletion["failures"][:RESIDUAL_SAMPLE_LIMIT]},
        residual=residual, seed_caches=seeds)


def _append_ledger(ledger: Path, entry: dict[str, Any]) -> None:
    contract.check_document(entry)
    ledger.parent.mkdir(parents=True, exist_ok=True)
    with open(ledger, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, sort_keys=True, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())

