"""Seeing a tree without following links: lstat walks, owned-bytes statistics, weight files and fingerprints.

Weight-file rule (HF blobs have no suffix): a regular file is a weight file when (a) its own name ends in a weight
suffix, or (b) a symlink in the same tree whose name ends in a weight suffix resolves to it (a blob behind a
``snapshots/<rev>/*.safetensors`` link), or (c) its first bytes are a safetensors header or the GGUF magic. Size alone
is never used: a large tokenizer or video is not a weight. A symlink that leaves the tree (a seed blob) is counted
separately as ``linked_outside_*``: the child references those bytes but does not own them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import stat
import struct
from pathlib import Path
from typing import Any, Sequence

from .. import inputs
from .layout import MANIFEST_NAME

WEIGHT_SUFFIXES = (".bin", ".ckpt", ".gguf", ".pt", ".pth", ".safetensors", ".onnx", ".msgpack", ".h5")


@dataclasses.dataclass(frozen=True)
class TreeEntry:
    """One path below a tree, seen through lstat (never following links)."""

    path: Path
    kind: str  # "dir" | "file" | "link" | "other"
    size_bytes: int
    link_target: str | None = None  # realpath of a link's target



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
                entries.append(TreeEntry(path, "link", st.st_size, _realpath(path)))
            elif stat.S_ISDIR(st.st_mode):
                entries.append(TreeEntry(path, "dir", 0))
                stack.append(path)
            elif stat.S_ISREG(st.st_mode):
                entries.append(TreeEntry(path, "file", st.st_size))
            else:
                entries.append(TreeEntry(path, "other", 0))
    return entries


def _realpath(path: Path) -> str | None:
    """realpath, or None when the tree changes under it (a name swapped between lstat and readlink)."""
    try:
        return os.path.realpath(path)
    except OSError:
        return None


def _has_weight_suffix(name: str) -> bool:
    return name.lower().endswith(WEIGHT_SUFFIXES)


def _has_weight_magic(path: Path, size: int) -> bool:
    """A safetensors header (u64 little-endian length, then '{') or the GGUF magic."""
    if size < 8:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            head = os.read(fd, 9) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        finally:
            os.close(fd)
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
            if (_has_weight_suffix(e.path.name) or _realpath(e.path) in weight_targets
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



def read_manifest(child: Path) -> dict[str, Any] | None:
    """A child's manifest through the one bounded reader (regular file, size, depth, finite numbers); None when it
    is missing, a link, or not a readable JSON object."""
    path = child / MANIFEST_NAME
    if path.is_symlink():
        return None
    return inputs.load_object_or_none(path)


def created_at(manifest: dict[str, Any] | None) -> float | None:
    """When the manifest says its child was made (Unix seconds), or None when it says nothing usable
    (``'yesterday'``, a bool, a non-finite or negative number)."""
    value = (manifest or {}).get("created_at_unix_s")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)

