"""Prepare a fresh child cache: claim the root, write the manifest first, overlay read-only seed caches."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterable

from .. import contract, fileio
from .layout import (MANIFEST_NAME, MARKER_NAME, MARKER_TEXT, marker_ok, cache_environment, child_name,
                     resolve_root, resolve_seed_hub)
from .ownership import HOLDERS, RunLock, holder_record, take_run_lock
from .tree import fingerprint_tree

COPIED_REPO_SUBDIRS = ("refs", "trees")  # copied so the run may update them; everything else is linked


@dataclasses.dataclass(frozen=True)
class SeedOverlay:
    seed: Path
    hub: Path
    fingerprint: str
    repos: tuple[str, ...]
    links_created: int
    files_copied: int
    links_recreated: int
    skipped_existing: int

    def as_dict(self) -> dict[str, Any]:
        return {"seed": str(self.seed), "hub": str(self.hub), "fingerprint": self.fingerprint,
                "repos": list(self.repos), "links_created": self.links_created, "files_copied": self.files_copied,
                "links_recreated": self.links_recreated, "skipped_existing": self.skipped_existing}


@dataclasses.dataclass(frozen=True)
class PreparedCache:
    root: Path
    child: Path
    env: dict[str, str]
    manifest_path: Path
    root_created: bool
    seeds: tuple[SeedOverlay, ...]
    lock: RunLock | None = None  # held for a run's lifetime; None for a child the user holds



def overlay_seed(seed: str | Path, target_hub: Path) -> SeedOverlay:
    """Expose a read-only hub cache inside ``target_hub``: blobs as links, refs/trees as writable copies.

    Existing target paths are kept, so with several seeds the first one wins. The seed is only read.
    """
    source = resolve_seed_hub(seed)
    target = target_hub.resolve()
    if source == target or source.is_relative_to(target) or target.is_relative_to(source):
        raise contract.UsageError("cache.seed_overlaps_target", f"seed hub {source} overlaps the child hub {target}",
                                  "a seed must be a separate, read-only cache outside --root")
    fingerprint = fingerprint_tree(source)
    target.mkdir(parents=True, exist_ok=True)
    (target / ".locks").mkdir(exist_ok=True)
    counts = dict(links_created=0, files_copied=0, links_recreated=0, skipped_existing=0)
    repos = []
    for entry in sorted(source.iterdir()):
        if entry.name == ".locks":
            continue
        repos.append(entry.name)
        dest = target / entry.name
        if entry.is_symlink() or not entry.is_dir():
            counts[_link_or_skip(dest, os.path.realpath(entry))] += 1
            continue
        for dirpath, dirnames, filenames in os.walk(entry):
            here = Path(dirpath)
            out = dest / here.relative_to(entry)
            out.mkdir(exist_ok=True)
            for name in sorted(dirnames + filenames):
                src, dst = here / name, out / name
                if src.is_symlink():
                    counts[_link_or_skip(dst, os.readlink(src), recreated=True)] += 1
                elif src.is_dir():
                    continue  # os.walk descends into it
                elif src.relative_to(entry).parts[0] in COPIED_REPO_SUBDIRS:
                    if os.path.lexists(dst):
                        counts["skipped_existing"] += 1
                    else:
                        shutil.copyfile(src, dst)
                        os.chmod(dst, 0o644)
                        counts["files_copied"] += 1
                else:
                    counts[_link_or_skip(dst, os.path.realpath(src))] += 1
    return SeedOverlay(Path(seed), source, fingerprint, tuple(repos), **counts)


def _link_or_skip(dest: Path, target: str, *, recreated: bool = False) -> str:
    if os.path.lexists(dest):
        return "skipped_existing"
    os.symlink(target, dest)
    return "links_recreated" if recreated else "links_created"


def prepare_child_cache(root: str | Path, model: str, label: str, seed_caches: Iterable[str | Path] = (), *,
                        held_by: str = "user") -> PreparedCache:
    """Create ``<root>/<model>-<label>`` (never reusing one), overlay the seeds, and return the engine environment.

    ``held_by="run"``: this process holds the child's lock until it cleans or hands over the child (ownership.py);
    ``"user"``: the child stays until the user cleans it, whatever happens to this process."""
    if held_by not in HOLDERS:
        raise ValueError(f"held_by must be one of {HOLDERS}, not {held_by!r}")
    name = child_name(model, label)
    resolved_root = resolve_root(root)
    seeds = list(seed_caches)
    for seed in seeds:
        hub = resolve_seed_hub(seed)
        seed_resolved = Path(seed).expanduser().resolve()
        for s in {hub, seed_resolved}:
            if resolved_root == s or resolved_root.is_relative_to(s):
                raise contract.UsageError("cache.root_inside_seed", f"cache root {resolved_root} is inside seed {s}",
                                          "seed caches are read-only: put --root outside every --seed-cache")
    child = resolved_root / name
    if os.path.lexists(child):
        raise contract.PreconditionError(
            "cache.child_exists", f"child cache {child} already exists",
            f"clean it first (cleanup_model_cache.py cleanup --root {resolved_root} --child {name} ...) "
            "or use another --label")
    try:
        root_created = _claim_root(resolved_root)
        child.mkdir()
    except OSError as exc:
        raise contract.PreconditionError("cache.root_not_writable", f"cannot create {child}: {exc.strerror}",
                                         "pass a --root on a writable disk") from None
    lock = None
    try:
        lock = take_run_lock(child) if held_by == "run" else None
        return _fill_child(resolved_root, child, model, label, seeds, root_created, held_by, lock)
    except OSError as exc:
        if lock is not None:
            lock.release()
        raise contract.ToolError(
            "cache.prepare_failed", f"preparing {child} failed: {exc}",
            f"remove the partial child: cleanup_model_cache.py cleanup --root {resolved_root} --child {child.name} "
            "--reason error --ledger FILE") from None


def _fill_child(resolved_root: Path, child: Path, model: str, label: str, seeds: list, root_created: bool,
                held_by: str, lock: RunLock | None) -> PreparedCache:
    env = cache_environment(child)
    manifest = {"manifest_version": 1, "model": model, "label": label, "root": str(resolved_root),
                "child": str(child), "created_at": contract.utc_now(), "created_at_unix_s": time.time(),
                "state": "preparing", "seed_caches": [], "env": env, "owner": holder_record(held_by)}
    manifest_path = child / MANIFEST_NAME
    _write_json(manifest_path, manifest)  # first, so a half-prepared child is still recognisably ours
    overlays = []
    for seed in seeds:
        overlays.append(overlay_seed(seed, Path(env["HF_HUB_CACHE"])))
    for key in ("HF_HUB_CACHE", "HF_ASSETS_CACHE", "HF_MODULES_CACHE", "HF_XET_CACHE", "MODELSCOPE_MODULES_CACHE",
                "SGLANG_DIFFUSION_CACHE_ROOT", "TORCH_HOME", "XDG_CACHE_HOME", "TRITON_CACHE_DIR",
                "TORCHINDUCTOR_CACHE_DIR", "TVM_FFI_CACHE_DIR", "SGLANG_DG_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE",
                "CUDA_CACHE_PATH"):
        Path(env[key]).mkdir(parents=True, exist_ok=True)
    manifest.update(state="ready", seed_caches=[o.as_dict() for o in overlays])
    _write_json(manifest_path, manifest)
    return PreparedCache(resolved_root, child, env, manifest_path, root_created, tuple(overlays), lock)


def _claim_root(root: Path) -> bool:
    """Create the root with our marker, or adopt an existing empty one; an unmarked non-empty root is refused."""
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    if marker_ok(root):
        return created
    if any(root.iterdir()):
        raise contract.PreconditionError(
            "cache.root_not_ours", f"{root} exists, is not empty and has no {MARKER_NAME} marker",
            "pass a new or empty directory as --root; this tool never adopts a directory holding other data")
    (root / MARKER_NAME).write_text(MARKER_TEXT, encoding="utf-8")
    return created


def _write_json(path: Path, document: dict[str, Any]) -> None:
    fileio.atomic_write_text(path, json.dumps(document, indent=2, sort_keys=True) + "\n")

