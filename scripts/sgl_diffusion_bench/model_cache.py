"""Isolated model caches for benchmark runs, a copy-on-write overlay of read-only seed caches, and a cleanup whose
"nothing left" claim comes from an independent re-scan rather than from the deletion's own bookkeeping.

Layout: ``<root>/.sglang-diffusion-benchmark-cache`` (ownership marker, written when we create or adopt the root) and
one child per run, ``<root>/<safe(model)>-<safe(label)>/``, holding ``.sglang-diffusion-benchmark-child.json``
(manifest: model, label, seed caches and their fingerprints), ``huggingface/`` + ``modelscope/`` (model caches),
``sgl_diffusion/`` (sglang's materialized overlay models), ``torch/``, ``xdg-cache/`` and ``jit/`` (Triton, Inductor,
tvm-ffi, DeepGEMM, FlashInfer, CUDA compute caches).

Weight-file rule (HF blobs have no suffix): a regular file is a weight file when (a) its own name ends in a weight
suffix, or (b) a symlink in the same tree whose name ends in a weight suffix resolves to it (a blob behind a
``snapshots/<rev>/*.safetensors`` link), or (c) its first bytes are a safetensors header or the GGUF magic. Size alone
is never used: a large tokenizer or video is not a weight. A symlink that leaves the tree (a seed blob) is counted
separately as ``linked_outside_*``: the child references those bytes but does not own them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import stat
import struct
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from . import contract, paths
from .env import repo_root as sglang_repo_root

MARKER_NAME = ".sglang-diffusion-benchmark-cache"
MARKER_TEXT = ("This directory is owned by sglang-diffusion-benchmark-profile (cleanup_model_cache.py).\n"
               "Only generated child caches (directories holding " + ".sglang-diffusion-benchmark-child.json"
               ") may be removed by the tool; nothing else here is ever deleted.\n")
MANIFEST_NAME = ".sglang-diffusion-benchmark-child.json"
WEIGHT_SUFFIXES = (".bin", ".ckpt", ".gguf", ".pt", ".pth", ".safetensors", ".onnx", ".msgpack", ".h5")
DEFAULT_HEADROOM_BYTES = 2 << 30  # logs, compiler caches and a partial download's temp file
DEFAULT_HUB_TIMEOUT_S = 5.0
RESIDUAL_SAMPLE_LIMIT = 50
EXIT_REASONS = ("success", "error", "interrupted")
COPIED_REPO_SUBDIRS = ("refs", "trees")  # copied so the run may update them; everything else is linked

Remover = Callable[[Path, str], None]


@dataclasses.dataclass(frozen=True)
class TreeEntry:
    """One path below a tree, seen through lstat (never following links)."""

    path: Path
    kind: str  # "dir" | "file" | "link" | "other"
    size_bytes: int
    link_target: str | None = None  # realpath of a link's target


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


# ----------------------------------------------------------------------------------------------- names and roots


def safe_name(text: str, what: str) -> str:
    """Characters outside alnum and ``-_.`` become ``_``; dot runs collapse and edge dots go, so ``..`` cannot form."""
    name = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9._-]", "_", text)).strip(".")
    if not name or not name.strip("_-."):
        raise contract.UsageError("cache.bad_name", f"{what} {text!r} leaves no usable directory name",
                                  f"pass a {what} with letters or digits")
    return name


def child_name(model: str, label: str) -> str:
    name = f"{safe_name(model, 'model')}-{safe_name(label, 'label')}"
    if len(name) > 200:
        raise contract.UsageError("cache.name_too_long", f"child cache name is {len(name)} characters (max 200)",
                                  "use a shorter --label")
    return name


def protected_paths() -> list[Path]:
    """Directories no cache root may be, or contain: /, $HOME, this bundle's checkout and the sglang checkout."""
    protected = [Path("/"), Path.home().resolve(), paths.CHECKOUT_ROOT.resolve()]
    sglang_root, _ = sglang_repo_root()
    if sglang_root is not None:
        protected.append(sglang_root.resolve())
    return protected


def resolve_root(root: str | Path) -> Path:
    """The resolved cache root; refuses /, $HOME, a repo root, or any ancestor of them (a symlink to / included)."""
    resolved = Path(root).expanduser().resolve()
    for protected in protected_paths():
        if protected == resolved or protected.is_relative_to(resolved):
            raise contract.UsageError(
                "cache.root_forbidden", f"cache root {root!r} resolves to {resolved}, which is or contains {protected}",
                "pass a dedicated directory such as /data/sglang-bench-cache as --root")
    return resolved


def resolve_seed_hub(seed: str | Path) -> Path:
    """``<seed>/hub`` if it is a directory, else the seed itself when named ``hub``; resolved."""
    seed_path = Path(seed).expanduser()
    if (seed_path / "hub").is_dir():
        return (seed_path / "hub").resolve()
    if seed_path.is_dir() and seed_path.resolve().name == "hub":
        return seed_path.resolve()
    raise contract.InputError("cache.seed_not_hf_cache",
                              f"seed cache {seed} is neither an HF home (with hub/) nor a hub directory",
                              "pass the HF home (e.g. ~/.cache/huggingface) or its hub/ directory as --seed-cache")


def _marker_ok(root: Path) -> bool:
    marker = root / MARKER_NAME
    try:
        st = marker.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and marker.read_text(encoding="utf-8", errors="replace").startswith(
        MARKER_TEXT.splitlines()[0])


# ----------------------------------------------------------------------------------------------- environment


def cache_environment(child: Path) -> dict[str, str]:
    """Every cache location the engine and its compilers write, pointed inside the child.

    Read by: huggingface_hub/diffusers/transformers (HF_*), modelscope (MODELSCOPE_*), sglang.multimodal_gen envs.py
    (SGLANG_DIFFUSION_CACHE_ROOT: materialized overlay models, i.e. weights), torch (TORCHINDUCTOR_CACHE_DIR,
    TORCH_HOME), triton (TRITON_CACHE_DIR), tvm_ffi.cpp.load_inline used by sglang.jit_kernel (TVM_FFI_CACHE_DIR),
    sglang's deep_gemm wrapper (SGLANG_DG_CACHE_DIR, copied into DG_JIT_CACHE_DIR), flashinfer's JIT
    (FLASHINFER_WORKSPACE_BASE), the CUDA driver's PTX cache (CUDA_CACHE_PATH), and anything else under ~/.cache
    that honours XDG_CACHE_HOME.
    """
    hf, hub, jit = child / "huggingface", child / "huggingface" / "hub", child / "jit"
    env = {
        "HF_HOME": hf, "HF_HUB_CACHE": hub, "HUGGINGFACE_HUB_CACHE": hub, "DIFFUSERS_CACHE": hub,
        "TRANSFORMERS_CACHE": hub, "HF_ASSETS_CACHE": hf / "assets", "HF_MODULES_CACHE": hf / "modules",
        "HF_XET_CACHE": hf / "xet", "MODELSCOPE_CACHE": child / "modelscope",
        "MODELSCOPE_MODULES_CACHE": child / "modelscope" / "modules",
        "SGLANG_DIFFUSION_CACHE_ROOT": child / "sgl_diffusion", "TORCH_HOME": child / "torch",
        "XDG_CACHE_HOME": child / "xdg-cache", "TRITON_CACHE_DIR": jit / "triton",
        "TORCHINDUCTOR_CACHE_DIR": jit / "torchinductor", "TVM_FFI_CACHE_DIR": jit / "tvm-ffi",
        "SGLANG_DG_CACHE_DIR": jit / "deep_gemm", "DG_JIT_CACHE_DIR": jit / "deep_gemm",
        "FLASHINFER_WORKSPACE_BASE": jit / "flashinfer", "CUDA_CACHE_PATH": jit / "cuda",
    }
    return {k: str(v) for k, v in sorted(env.items())}


# ----------------------------------------------------------------------------------------------- walking


def walk_tree(top: Path) -> list[TreeEntry]:
    """Every path below ``top`` in sorted pre-order, through lstat only; a link to a directory is a leaf."""
    entries: list[TreeEntry] = []
    stack = [top]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as it:
                children = sorted(it, key=lambda e: e.name, reverse=True)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue  # gone, or unreadable: its rmdir then fails and the re-scan reports the directory
        for item in children:
            path = Path(item.path)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                entries.append(TreeEntry(path, "link", st.st_size, os.path.realpath(path)))
            elif stat.S_ISDIR(st.st_mode):
                entries.append(TreeEntry(path, "dir", 0))
                stack.append(path)
            elif stat.S_ISREG(st.st_mode):
                entries.append(TreeEntry(path, "file", st.st_size))
            else:
                entries.append(TreeEntry(path, "other", 0))
    return entries


def _has_weight_suffix(name: str) -> bool:
    return name.lower().endswith(WEIGHT_SUFFIXES)


def _has_weight_magic(path: Path, size: int) -> bool:
    """A safetensors header (u64 little-endian length, then '{') or the GGUF magic."""
    if size < 8:
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(9)
    except OSError:
        return False
    if head[:4] == b"GGUF":
        return True
    return len(head) == 9 and head[8:9] == b"{" and 2 <= struct.unpack("<Q", head[:8])[0] <= size - 8


def compute_stats(top: Path, entries: Sequence[TreeEntry]) -> dict[str, int]:
    """Counts and bytes owned by the tree (lstat sizes), weights found by the rule in the module docstring."""
    inside = str(top) + os.sep
    weight_targets = {e.link_target for e in entries if e.kind == "link" and _has_weight_suffix(e.path.name)}
    stats = dict(file_count=0, symlink_count=0, dir_count=0, weight_file_count=0, weight_bytes=0, total_bytes=0,
                 linked_outside_count=0, linked_outside_weight_count=0)
    for e in entries:
        if e.kind == "dir":
            stats["dir_count"] += 1
        elif e.kind == "link":
            stats["symlink_count"] += 1
            stats["total_bytes"] += e.size_bytes
            if not (e.link_target or "").startswith(inside):
                stats["linked_outside_count"] += 1
                stats["linked_outside_weight_count"] += _has_weight_suffix(e.path.name)
        else:
            stats["file_count"] += 1
            stats["total_bytes"] += e.size_bytes
            if (_has_weight_suffix(e.path.name) or os.path.realpath(e.path) in weight_targets
                    or _has_weight_magic(e.path, e.size_bytes)):
                stats["weight_file_count"] += 1
                stats["weight_bytes"] += e.size_bytes
    return stats


def hf_scan(hub: Path) -> dict[str, Any] | None:
    """huggingface_hub's own view of a hub cache (logical bytes: seed blobs behind links count at full size)."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    if not hub.is_dir():
        return None
    try:
        info = scan_cache_dir(hub)
    except CacheNotFound:
        return None
    files = {f.blob_path: f for repo in info.repos for rev in repo.revisions for f in rev.files}
    return {"repo_count": len(info.repos), "revision_count": sum(len(r.revisions) for r in info.repos),
            "size_on_disk_bytes": int(info.size_on_disk), "blob_count": len(files),
            "weight_blob_count": sum(_has_weight_suffix(f.file_name) for f in files.values()),
            "warnings": sorted(str(w) for w in info.warnings)[:20]}


def fingerprint_tree(top: Path, *, content: bool = False) -> str:
    """sha256 over every path, kind, mode and link text below ``top``; file sizes+mtimes, or bytes with ``content``."""
    digest = hashlib.sha256()
    for e in [TreeEntry(top, "dir", 0), *walk_tree(top)]:
        st = os.lstat(e.path)
        rel = os.path.relpath(e.path, top)
        digest.update(f"{rel}\0{e.kind}\0{stat.S_IMODE(st.st_mode):o}\0".encode())
        if e.kind == "link":
            digest.update(os.readlink(e.path).encode())
        elif e.kind == "file" and content:
            with open(e.path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
        elif e.kind == "file":
            digest.update(f"{st.st_size}\0{st.st_mtime_ns}".encode())
        digest.update(b"\n")
    return digest.hexdigest()


# ----------------------------------------------------------------------------------------------- prepare


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


def prepare_child_cache(root: str | Path, model: str, label: str,
                        seed_caches: Iterable[str | Path] = ()) -> PreparedCache:
    """Create ``<root>/<model>-<label>`` (never reusing one), overlay the seeds, and return the engine environment."""
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
    try:
        return _fill_child(resolved_root, child, model, label, seeds, root_created)
    except OSError as exc:
        raise contract.ToolError(
            "cache.prepare_failed", f"preparing {child} failed: {exc}",
            f"remove the partial child: cleanup_model_cache.py cleanup --root {resolved_root} --child {child.name} "
            "--reason error --ledger FILE") from None


def _fill_child(resolved_root: Path, child: Path, model: str, label: str, seeds: list,
                root_created: bool) -> PreparedCache:
    env = cache_environment(child)
    manifest = {"manifest_version": 1, "model": model, "label": label, "root": str(resolved_root),
                "child": str(child), "created_at": contract.utc_now(), "created_at_unix_s": time.time(),
                "state": "preparing", "seed_caches": [], "env": env}
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
    return PreparedCache(resolved_root, child, env, manifest_path, root_created, tuple(overlays))


def _claim_root(root: Path) -> bool:
    """Create the root with our marker, or adopt an existing empty one; an unmarked non-empty root is refused."""
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    if _marker_ok(root):
        return created
    if any(root.iterdir()):
        raise contract.PreconditionError(
            "cache.root_not_ours", f"{root} exists, is not empty and has no {MARKER_NAME} marker",
            "pass a new or empty directory as --root; this tool never adopts a directory holding other data")
    (root / MARKER_NAME).write_text(MARKER_TEXT, encoding="utf-8")
    return created


def _write_json(path: Path, document: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------- cleanup


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


def _read_manifest(child: Path) -> dict[str, Any] | None:
    path = child / MANIFEST_NAME
    if path.is_symlink() or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


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


# ----------------------------------------------------------------------------------------------- verify


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


# ----------------------------------------------------------------------------------------------- disk preflight


def disk_preflight(model_id: str, revision: str | None, cache_dir: str | Path, seed_caches: Iterable[str | Path] = (),
                   *, headroom_bytes: int = DEFAULT_HEADROOM_BYTES, hub_timeout_s: float = DEFAULT_HUB_TIMEOUT_S,
                   environ: dict[str, str] | None = None, model_info: Callable[..., Any] | None = None
                   ) -> dict[str, Any]:
    """Will the model fit? Size from hub metadata, else from a cached snapshot in a seed, minus what seeds provide.

    Outcomes: ``fits``; ``unknown_size`` (no hub metadata and no cached snapshot: the caller decides, and is told
    the run may fill the disk); ``does_not_fit`` raises PreconditionError (exit 3) carrying these figures.
    """
    env = os.environ if environ is None else environ
    hubs = [resolve_seed_hub(s) for s in seed_caches]
    free = _free_bytes(Path(cache_dir).expanduser())
    result: dict[str, Any] = {"model": model_id, "revision": revision, "cache_dir": str(cache_dir),
                              "free_bytes": free, "headroom_bytes": headroom_bytes, "size_source": None,
                              "required_bytes": None, "provided_by_seed_bytes": None, "to_download_bytes": None,
                              "file_count": None, "hub_error": None, "notes": []}
    local = Path(model_id).expanduser()
    if local.is_dir():
        result.update(size_source="local_path", required_bytes=_dir_bytes(local), provided_by_seed_bytes=0,
                      to_download_bytes=0, file_count=sum(1 for p in local.rglob("*") if p.is_file()))
        return _judge(result)
    files, error = _hub_files(model_id, revision, hub_timeout_s, env, model_info)
    result["hub_error"] = error
    repo_dirs = [h / ("models--" + model_id.replace("/", "--")) for h in hubs]
    if files is not None:
        provided = sum(size for name, size, blob_ids in files if _seed_provides(repo_dirs, revision, name, blob_ids))
        required = sum(size for _, size, _ in files)
        result.update(size_source="hub_metadata", required_bytes=required, provided_by_seed_bytes=provided,
                      to_download_bytes=required - provided, file_count=len(files))
        return _judge(result)
    for repo in repo_dirs:
        snapshot = _snapshot_dir(repo, revision)
        if snapshot is not None:
            size = _dir_bytes(snapshot)
            result.update(size_source="seed_snapshot", required_bytes=size, provided_by_seed_bytes=size,
                          to_download_bytes=0, file_count=sum(1 for p in snapshot.rglob("*") if p.is_file()))
            result["notes"].append(f"size from the cached snapshot {snapshot}; without hub metadata an incomplete "
                                   "snapshot cannot be detected, so files it lacks would still be downloaded")
            return _judge(result)
    result["notes"].append("size unknown: no hub metadata (" + (error or "not asked") + ") and no cached snapshot in "
                           "the seed caches; the download may fill the disk - pass --seed-cache or allow hub access")
    return {**result, "outcome": "unknown_size"}


def _judge(result: dict[str, Any]) -> dict[str, Any]:
    free = result["free_bytes"]
    if free is not None and result["to_download_bytes"] + result["headroom_bytes"] > free:
        result["outcome"] = "does_not_fit"
        raise contract.PreconditionError(
            "cache.disk_too_small",
            f"{result['model']} needs {result['to_download_bytes']} bytes to download (+{result['headroom_bytes']} "
            f"headroom) but {result['cache_dir']} has {free} bytes free",
            "free disk space, pick another --root on a larger disk, or pass a --seed-cache that already holds it",
            details=result)
    result["outcome"] = "fits"
    return result


def _hub_files(model_id: str, revision: str | None, timeout_s: float, env, model_info
               ) -> tuple[list[tuple[str, int, tuple[str, ...]]] | None, str | None]:
    """(rfilename, size, blob ids) per file from the hub, or (None, why not). Never waits past ``timeout_s``."""
    if env.get("HF_HUB_OFFLINE", "").strip().lower() not in ("", "0", "false", "no", "off"):
        return None, "HF_HUB_OFFLINE is set"
    import httpx
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    fetch = model_info or HfApi().model_info
    try:
        info = fetch(model_id, revision=revision, files_metadata=True, timeout=timeout_s)
    except (OSError, httpx.HTTPError, HfHubHTTPError, ValueError) as exc:
        return None, contract.redact(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")[:300]
    files = []
    for sibling in info.siblings or []:
        if sibling.size is None:
            return None, f"hub metadata lacks the size of {sibling.rfilename}"
        ids = tuple(i for i in (getattr(sibling.lfs, "sha256", None) if sibling.lfs else None, sibling.blob_id) if i)
        files.append((sibling.rfilename, int(sibling.size), ids))
    return files, None


def _seed_provides(repo_dirs: list[Path], revision: str | None, name: str, blob_ids: tuple[str, ...]) -> bool:
    for repo in repo_dirs:
        if any((repo / "blobs" / b).exists() for b in blob_ids):
            return True
        snapshot = _snapshot_dir(repo, revision)
        if snapshot is not None and (snapshot / name).exists():
            return True
    return False


def _snapshot_dir(repo: Path, revision: str | None) -> Path | None:
    rev = revision or "main"
    ref = repo / "refs" / rev
    commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else rev
    snapshot = repo / "snapshots" / commit
    return snapshot if snapshot.is_dir() else None


def _dir_bytes(top: Path) -> int:
    return sum(p.stat().st_size for p in top.rglob("*") if p.is_file())


def _free_bytes(path: Path) -> int | None:
    for candidate in [path, *path.parents]:
        if candidate.exists():
            return shutil.disk_usage(candidate).free
    return None
