"""Will a model fit? Hub metadata or a seed snapshot against free disk, before anything is downloaded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterable

from .. import contract, fileio, hf_settings
from .layout import resolve_seed_hub

DEFAULT_HEADROOM_BYTES = 2 << 30  # logs, compiler caches and a partial download's temp file
DEFAULT_HUB_TIMEOUT_S = 5.0
MAX_LOCAL_FILES = 100_000  # a pipeline directory holds tens to hundreds of files


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
    free = fileio.free_bytes(Path(cache_dir).expanduser())
    result: dict[str, Any] = {"model": model_id, "revision": revision, "cache_dir": str(cache_dir),
                              "free_bytes": free, "headroom_bytes": headroom_bytes, "size_source": None,
                              "required_bytes": None, "provided_by_seed_bytes": None, "to_download_bytes": None,
                              "file_count": None, "hub_error": None, "notes": []}
    local = Path(model_id).expanduser()
    if local.is_dir():
        size, count = local_model_size(local)
        result.update(size_source="local_path", required_bytes=size, provided_by_seed_bytes=0,
                      to_download_bytes=0, file_count=count)
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
            size, count = local_model_size(snapshot)
            result.update(size_source="seed_snapshot", required_bytes=size, provided_by_seed_bytes=size,
                          to_download_bytes=0, file_count=count)
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
    if hf_settings.offline(env):
        return None, "HF_HUB_OFFLINE is set"
    import httpx
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    fetch = model_info or HfApi().model_info
    try:
        info = hf_settings.within(timeout_s, lambda: fetch(model_id, revision=revision, files_metadata=True,
                                                            timeout=timeout_s))
    except (OSError, httpx.HTTPError, HfHubHTTPError, ValueError) as exc:  # DeadlinePassed is a TimeoutError
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


def local_model_size(top: Path) -> tuple[int, int]:
    """Bytes and file count of a model directory or snapshot: file links followed (a snapshot's files link to its
    blobs), directory links not, unreadable entries skipped, iterative (any depth). Past MAX_LOCAL_FILES it is not
    a model directory (``--model /`` walked the whole machine and stopped on /proc with exit 70)."""
    total = count = 0
    stack = [top]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                items = list(entries)
        except OSError:
            continue
        for item in items:
            try:
                if item.is_dir(follow_symlinks=False):
                    stack.append(item.path)
                    continue
                if not item.is_file():
                    continue
                size = item.stat().st_size
            except OSError:
                continue
            total, count = total + size, count + 1
            if count > MAX_LOCAL_FILES:
                raise contract.UsageError(
                    "cache.not_a_model_dir", f"{top} holds more than {MAX_LOCAL_FILES} files: not a model directory",
                    "give the model's own directory (a diffusers pipeline has model_index.json) or a hub id")
    return total, count
