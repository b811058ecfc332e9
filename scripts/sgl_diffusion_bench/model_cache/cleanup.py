"""Cleanup of one child cache that cannot leave it, and whose "nothing left" claim comes from an independent re-scan.

Deletion never resolves a path: it opens the root, then the child and each directory below it relative to its
parent's file descriptor with ``O_NOFOLLOW | O_DIRECTORY``, checks that every directory and entry is the one the plan
saw (device + inode), and unlinks by name relative to that descriptor. A directory swapped for a symlink (even by
``renameat2(RENAME_EXCHANGE)`` between check and use) fails to open; an entry swapped for another inode is left and
reported. Before each deletion the directory's current location is read back from ``/proc/self/fd`` and the
post-check lists every directory a deletion happened in. The ledger gets a "started" line before the first deletion
(an unwritable ledger refuses the cleanup), and the manifest goes last so a stopped cleanup can be resumed.
"""

from __future__ import annotations

import dataclasses
import uuid
import os
import stat
import time
from pathlib import Path
from typing import Any, Callable

from .. import contract
from .layout import MANIFEST_NAME, MARKER_NAME, marker_ok, resolve_root
from .ledger import open_ledger, write_line, owner_field
from .ownership import check_run_files
from .tree import TreeEntry, read_manifest, compute_stats, fingerprint_tree, hf_scan, walk_tree

RESIDUAL_SAMPLE_LIMIT = 50
EXIT_REASONS = ("success", "error", "interrupted", "outputs_differ", "reclaimed")
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Remover = Callable[[int, str, str, Path], None]  # (directory fd, entry name, kind, path for messages)
Identity = tuple[str, int, int]  # (kind, st_dev, st_ino)


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
    root_identity: Identity = ("dir", 0, 0)
    identities: dict[Path, Identity] = dataclasses.field(default_factory=dict)  # relative path -> what was there

    def as_dict(self) -> dict[str, Any]:
        return {"entry_count": len(self.entries), "before": self.before, "hf_scan": self.hf_scan,
                "outside_link_count": len(self.outside_targets)}



def _resolve_child(root: str | Path, child: str | Path) -> tuple[Path, Path]:
    resolved_root = resolve_root(root)
    if not marker_ok(resolved_root):
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
    manifest = read_manifest(child_path)
    if manifest is None and any(e.kind != "dir" for e in entries):
        raise contract.PreconditionError(
            "cache.child_not_ours", f"{child_path} holds files but no {MANIFEST_NAME}: not a generated child",
            "nothing was deleted; only children made by 'prepare' are removed")
    outside = []
    inside = str(child_path) + os.sep
    for e in entries:
        if e.kind == "link" and not (e.link_target or "").startswith(inside):
            outside.append((str(e.path), e.link_target or "", _signature(Path(e.link_target or ""))))
    root_identity, identities = _identities(resolved_root, child_path.name)
    return CleanupPlan(resolved_root, child_path, manifest, entries, compute_stats(child_path, entries),
                       hf_scan(child_path / "huggingface" / "hub"), tuple(outside), root_identity, identities)


def _identity(st: os.stat_result) -> Identity:
    kind = ("link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode)
            else "file" if stat.S_ISREG(st.st_mode) else "other")
    return (kind, st.st_dev, st.st_ino)


def _identities(root: Path, child_name: str) -> tuple[Identity, dict[Path, Identity]]:
    """What is below the child, seen through directory fds (never a path): relative path -> (kind, dev, ino)."""
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        child_fd = os.open(child_name, DIR_FLAGS, dir_fd=root_fd)
        found = {Path(): _identity(os.fstat(child_fd))}
        try:
            _collect(child_fd, Path(), found)
        finally:
            os.close(child_fd)
        return _identity(os.fstat(root_fd)), found
    finally:
        os.close(root_fd)


def _collect(dir_fd: int, rel: Path, found: dict[Path, Identity]) -> None:
    for name in sorted(os.listdir(dir_fd)):
        try:
            ident = _identity(os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
        except FileNotFoundError:
            continue
        found[rel / name] = ident
        if ident[0] == "dir":
            try:
                sub = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue  # swapped or unreadable: its removal then fails and the re-scan reports it
            try:
                if _identity(os.fstat(sub)) == ident:
                    _collect(sub, rel / name, found)
            finally:
                os.close(sub)


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def remove_entry(dir_fd: int, name: str, kind: str, path: Path) -> None:
    """Delete one entry by name inside an open directory, never following links: unlink, or rmdir when empty."""
    if kind == "dir":
        os.rmdir(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def _fd_location(dir_fd: int) -> str | None:
    """Where an open directory is right now, as the kernel sees it (Linux); None where /proc is not mounted."""
    try:
        return os.readlink(f"/proc/self/fd/{dir_fd}")
    except OSError:
        return None


class _Sweep:
    """One deletion pass over the planned tree, descending only through directory fds that match the plan."""

    def __init__(self, plan: CleanupPlan, remove: Remover, outcome: dict[str, Any]):
        self.plan, self.remove, self.outcome = plan, remove, outcome
        self.seen: set[Path] = set()
        self.locations: set[str] = set()

    def fail(self, rel: Path, error: str) -> None:
        self.outcome["failures"].append({"path": str(self.plan.child / rel), "error": error})

    def run(self, dir_fd: int, rel: Path, kinds: frozenset[str]) -> None:
        for name in sorted(os.listdir(dir_fd)):
            path = rel / name
            planned = self.plan.identities.get(path)
            if planned is None or path == Path(MANIFEST_NAME):
                continue  # not planned (appeared later: the re-scan reports it); the manifest goes last
            try:
                now = _identity(os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
            except FileNotFoundError:
                continue
            self.seen.add(path)
            if now != planned:
                self.fail(path, f"replaced since planning (was a {planned[0]}, now a {now[0]} with another inode)")
                continue
            if now[0] == "dir":
                try:
                    sub = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
                except OSError as exc:
                    self.fail(path, f"not opened as a real directory ({exc.strerror}); a symlink appeared on the path")
                    continue
                try:
                    if _identity(os.fstat(sub)) != planned:
                        self.fail(path, "replaced between check and open; not descended")
                        continue
                    self.run(sub, path, kinds)
                finally:
                    os.close(sub)
            if now[0] in kinds:
                self.delete(dir_fd, name, path, planned)

    def delete(self, dir_fd: int, name: str, path: Path, planned: Identity) -> None:
        expected = str(self.plan.child / path.parent)
        where = _fd_location(dir_fd)
        if where is not None and where != expected:
            self.fail(path, f"its directory is now at {where}, not in the child; not deleted")
            return
        try:
            if _identity(os.stat(name, dir_fd=dir_fd, follow_symlinks=False)) != planned:
                self.fail(path, "replaced just before deletion; not deleted")
                return
            self.remove(dir_fd, name, planned[0], self.plan.child / path)
        except FileNotFoundError:
            return
        except OSError as exc:
            self.fail(path, f"{type(exc).__name__}: {exc.strerror}")
            return
        self.outcome["removed_count"] += 1
        self.locations.add(where if where is not None else expected)


def execute_cleanup(plan: CleanupPlan, remove: Remover = remove_entry) -> dict[str, Any]:
    """Remove the planned entries relative to directory fds: links first (never a pointer to a missing blob), then
    files and directories bottom-up, the manifest last and only once nothing else is left, then the child itself.

    KeyboardInterrupt propagates with ``interrupted`` set in the exception's ``outcome`` attribute.
    """
    outcome: dict[str, Any] = {"planned_entry_count": max(len(plan.identities), len(plan.entries) + 1),
                               "removed_count": 0, "already_absent_count": 0, "failures": [], "interrupted": False}
    sweep = _Sweep(plan, remove, outcome)
    try:
        _execute(plan, sweep)
    except KeyboardInterrupt as exc:
        outcome["interrupted"] = True
        exc.outcome = outcome  # type: ignore[attr-defined]
        raise
    finally:
        outcome["already_absent_count"] = max(0, len(plan.identities) - 1 - len(sweep.seen))
        outcome["locations"] = sorted(sweep.locations)
    return outcome


def _execute(plan: CleanupPlan, sweep: _Sweep) -> None:
    try:
        root_fd = os.open(plan.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        sweep.fail(Path(), f"root {plan.root} not opened: {exc.strerror}")
        return
    try:
        if _identity(os.fstat(root_fd)) != plan.root_identity:
            sweep.fail(Path(), f"root {plan.root} was replaced since planning; nothing deleted")
            return
        try:
            child_fd = os.open(plan.child.name, DIR_FLAGS, dir_fd=root_fd)
        except FileNotFoundError:
            return
        except OSError as exc:
            sweep.fail(Path(), f"child not opened as a real directory ({exc.strerror}); nothing deleted")
            return
        try:
            if _identity(os.fstat(child_fd)) != plan.identities.get(Path()):
                sweep.fail(Path(), "child was replaced since planning; nothing deleted")
                return
            sweep.run(child_fd, Path(), frozenset({"link"}))
            sweep.run(child_fd, Path(), frozenset({"file", "other", "dir"}))
            manifest = plan.identities.get(Path(MANIFEST_NAME))
            if os.listdir(child_fd) == [MANIFEST_NAME] and manifest is not None:
                sweep.seen.add(Path(MANIFEST_NAME))
                sweep.delete(child_fd, MANIFEST_NAME, Path(MANIFEST_NAME), manifest)
        finally:
            os.close(child_fd)
        _remove_child(plan, sweep, root_fd)
    finally:
        os.close(root_fd)


def _remove_child(plan: CleanupPlan, sweep: _Sweep, root_fd: int) -> None:
    where = _fd_location(root_fd)
    if where is not None and where != str(plan.root):
        sweep.fail(Path(), f"the root is now at {where}; child not removed")
        return
    try:
        if _identity(os.stat(plan.child.name, dir_fd=root_fd, follow_symlinks=False)) != plan.identities.get(Path()):
            sweep.fail(Path(), "child was replaced; not removed")
            return
        sweep.remove(root_fd, plan.child.name, "dir", plan.child)
    except FileNotFoundError:
        return
    except OSError as exc:
        sweep.fail(Path(), f"{type(exc).__name__}: {exc.strerror}")
        return
    sweep.outcome["removed_count"] += 1
    sweep.locations.add(where if where is not None else str(plan.root))


def rescan_residual(plan: CleanupPlan, locations: list[str] | None = None) -> tuple[dict[str, Any], dict[str, int]]:
    """The independent check: list the root afresh, lstat the child and every former entry, walk what remains,
    re-lstat each outside target a link pointed at, and check that every directory a deletion happened in was the
    child, a directory below it, or (for the child itself) the root. Returns (residual evidence, after-stats)."""
    listed = set(os.listdir(plan.root))
    try:
        os.lstat(plan.child)
        child_present = True
    except FileNotFoundError:
        child_present = False
    present = [str(e.path) for e in plan.entries if os.path.lexists(e.path)]
    after = compute_stats(plan.child, walk_tree(plan.child)) if child_present else compute_stats(plan.child, [])
    changed = [link for link, target, sig in plan.outside_targets if _signature(Path(target)) != sig]
    inside = str(plan.child) + os.sep
    escaped = [d for d in (locations or []) if d not in (str(plan.root), str(plan.child)) and not d.startswith(inside)]
    residual = {
        "child_present": child_present, "child_listed_in_root": plan.child.name in listed,
        "root_entry_count": len(listed), "former_entries_checked": len(plan.entries),
        "former_entries_present": len(present), "present_paths": present[:RESIDUAL_SAMPLE_LIMIT],
        "outside_targets_checked": len(plan.outside_targets),
        "outside_targets_changed": changed[:RESIDUAL_SAMPLE_LIMIT],
        "deletion_directories_checked": len(locations or []),
        "deletions_outside_child": escaped[:RESIDUAL_SAMPLE_LIMIT],
    }
    residual["clean"] = not (child_present or residual["child_listed_in_root"] or present or changed or escaped)
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
                        remove: Remover = remove_entry, only_run_files: bool = False) -> dict[str, Any]:
    """Plan, write the ledger's "started" line, delete, re-scan independently, append the finished line; returns it.

    ``entry["ok"]`` is false when anything remains, a deletion failed, a link's outside target changed, a deletion
    happened outside the child, or a seed cache's fingerprint moved. An unwritable ledger refuses before anything is
    deleted. On KeyboardInterrupt (or any crash) the finished entry (marked interrupted) is still written, then the
    exception is re-raised. ``only_run_files`` (every cleanup the tool starts on its own): refuse, deleting nothing,
    a child holding what its run did not create (``cache.foreign_files``).
    """
    if reason not in EXIT_REASONS:
        raise contract.UsageError("cache.bad_reason", f"reason {reason!r} is not one of {EXIT_REASONS}",
                                  "pass --reason success, error or interrupted")
    plan = plan_cleanup(root, child)
    if only_run_files:
        check_run_files(plan.child, plan.entries, ((plan.manifest or {}).get("owner") or {}).get("uid"))
    ledger = Path(ledger_path).expanduser().resolve()
    if ledger.is_relative_to(plan.child):
        raise contract.UsageError("cache.ledger_inside_child", f"ledger {ledger} is inside the child being deleted",
                                  "write the ledger next to the benchmark outputs, outside --root's children")
    manifest = plan.manifest or {}
    model = model if model is not None else manifest.get("model", "")
    label = label if label is not None else manifest.get("label", "")
    cleanup_id = uuid.uuid4().hex
    ledger_fd = open_ledger(ledger)
    try:
        write_line(ledger_fd, _started_entry(plan, reason, model, label, cleanup_id))
        try:
            deletion = execute_cleanup(plan, remove)
        except BaseException as exc:
            outcome = getattr(exc, "outcome", None) or {"failures": [{"path": str(plan.child),
                                                                       "error": f"stopped by {type(exc).__name__}"}]}
            write_line(ledger_fd, _ledger_entry(plan, outcome, reason, model, label, cleanup_id))
            raise
        entry = _ledger_entry(plan, deletion, reason, model, label, cleanup_id)
        write_line(ledger_fd, entry)
    finally:
        os.close(ledger_fd)
    return entry


def _started_entry(plan: CleanupPlan, reason: str, model: str, label: str, cleanup_id: str) -> dict[str, Any]:
    """The line written before the first deletion: the plan's figures, the child still present, not ok."""
    residual = {"child_present": True, "child_listed_in_root": True, "root_entry_count": 0,
                "former_entries_checked": len(plan.entries), "former_entries_present": len(plan.entries),
                "present_paths": [], "outside_targets_checked": len(plan.outside_targets),
                "outside_targets_changed": [], "clean": False}
    deletion = {"planned_entry_count": max(len(plan.identities), len(plan.entries) + 1), "removed_count": 0,
                "already_absent_count": 0, "failures": [], "interrupted": False}
    return contract.envelope(
        "cleanup-ledger.v1", "cleanup_model_cache", ok=False, phase="started", cleanup_id=cleanup_id, model=model,
        label=label, exit_reason=reason, root=str(plan.root), cache_dir=str(plan.child),
        cleaned_at_unix_s=round(time.time(), 3), before=plan.before, after=plan.before, hf_scan_before=plan.hf_scan,
        hf_scan_after=plan.hf_scan, deletion=deletion, residual=residual, seed_caches=[], **owner_field(plan.manifest))


def _ledger_entry(plan: CleanupPlan, deletion: dict[str, Any], reason: str, model: str, label: str,
                  cleanup_id: str) -> dict[str, Any]:
    deletion = {"planned_entry_count": len(plan.entries) + 1, "removed_count": 0, "already_absent_count": 0,
                "failures": [], "interrupted": True, **deletion}
    locations = deletion.pop("locations", [])
    residual, after = rescan_residual(plan, locations)
    seeds = _seed_checks(plan.manifest)
    ok = (residual["clean"] and not deletion["failures"] and not deletion["interrupted"]
          and all(s["unchanged"] for s in seeds))
    return contract.envelope(
        "cleanup-ledger.v1", "cleanup_model_cache", ok=ok, phase="finished", cleanup_id=cleanup_id, model=model,
        label=label, exit_reason=reason, root=str(plan.root), cache_dir=str(plan.child),
        cleaned_at_unix_s=round(time.time(), 3), before=plan.before, after=after, hf_scan_before=plan.hf_scan,
        hf_scan_after=hf_scan(plan.child / "huggingface" / "hub"),
        deletion={**deletion, "failures": deletion["failures"][:RESIDUAL_SAMPLE_LIMIT]},
        residual=residual, seed_caches=seeds, **owner_field(plan.manifest))
