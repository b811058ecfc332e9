"""Can this preset's weights be reached here? Gated models need a token, or a complete copy already in the local
Hugging Face cache, in which case the run goes offline (HF_HUB_OFFLINE=1) so the engine never asks the hub.

A gated preset with neither is refused before anything runs (exit 3): the engine would otherwise start, hold the
GPUs and fail with a misleading 'not supported' error. Completeness comes from huggingface_hub's own cache scan
(``scan_cache_dir``), checked against the snapshot's ``model_index.json`` and weight indexes.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from .. import contract, hf_settings
from ..presets import Preset

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1"}


@dataclasses.dataclass(frozen=True)
class Access:
    decision: str  # public | local | token | offline_local_copy | refused
    reason: str
    token_present: bool
    local_copy: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _problems(snapshot: Path) -> list[str]:
    """What a diffusers snapshot lacks: model_index.json, a component folder, a weight shard its index names."""
    index = snapshot / "model_index.json"
    if not index.is_file():
        return ["model_index.json"]
    try:
        components = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ["model_index.json (unreadable)"]
    missing = []
    for name, spec in components.items():
        if name.startswith("_") or not isinstance(spec, list) or spec[0] is None:
            continue
        folder = snapshot / name
        if not folder.is_dir() or not any(p.is_file() for p in folder.iterdir()):
            missing.append(f"{name}/")
            continue
        for weight_index in folder.glob("*.index.json"):
            try:
                shards = set(json.loads(weight_index.read_text(encoding="utf-8")).get("weight_map", {}).values())
            except (OSError, ValueError):
                missing.append(str(weight_index.relative_to(snapshot)) + " (unreadable)")
                continue
            missing += [f"{name}/{s}" for s in sorted(shards) if not (folder / s).is_file()]
    return missing


def complete_copy(repo_id: str, hubs: Iterable[Path]) -> dict[str, Any] | None:
    """The newest complete cached snapshot of ``repo_id`` in any of ``hubs`` (huggingface_hub's scan), or None.
    A repo with a download still in progress (``*.incomplete`` blobs) never counts."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    for hub in hubs:
        try:
            info = scan_cache_dir(hub)
        except (CacheNotFound, OSError, ValueError):
            continue
        for repo in info.repos:
            if repo.repo_id != repo_id or repo.repo_type != "model":
                continue
            if any((repo.repo_path / "blobs").glob("*.incomplete")):
                continue
            for revision in sorted(repo.revisions, key=lambda r: -r.last_modified):
                if not _problems(revision.snapshot_path):
                    return {"hub": str(hub), "revision": revision.commit_hash,
                            "snapshot": str(revision.snapshot_path), "size_on_disk": revision.size_on_disk}
    return None


def decide(preset: Preset, environ: Mapping[str, str], hubs: Iterable[Path] | None = None) -> Access:
    """How the run reaches the weights. ``hubs``: where a local copy may be (default: the caller's hub cache)."""
    token = hf_settings.token_available(environ)
    if preset.local_model:
        return Access("local", "the bundle builds this model locally", token, None)
    if not preset.gated:
        return Access("public", f"{preset.model} is not gated", token, None)
    if token:
        return Access("token", f"{preset.model} is gated; a Hugging Face token is available", token, None)
    copy = complete_copy(preset.model, list(hubs) if hubs is not None else [hf_settings.hub_cache(environ)])
    if copy:
        return Access("offline_local_copy", f"{preset.model} is gated and no token is set, but a complete copy is "
                      f"cached at {copy['snapshot']}: the run goes offline (HF_HUB_OFFLINE=1)", token, copy)
    return Access("refused", f"{preset.model} is gated: no Hugging Face token is set and no complete copy is in "
                  "the local cache", token, None)


def require(preset: Preset, environ: Mapping[str, str], hubs: Iterable[Path] | None = None) -> Preset:
    """The preset to run (offline when only a local copy exists), or a refusal before anything starts."""
    access = decide(preset, environ, hubs)
    if access.decision == "refused":
        raise contract.PreconditionError(
            "hf.gated_no_token", f"preset {preset.name!r}: {access.reason}",
            f"{hf_settings.MISSING_TOKEN_HINT} (a token whose account accepted the model's licence), or download "
            f"{preset.model} into the Hugging Face cache first", details={"access": access.to_json()})
    if access.decision == "offline_local_copy":
        return dataclasses.replace(preset, env={**preset.env, **OFFLINE_ENV})
    return preset
