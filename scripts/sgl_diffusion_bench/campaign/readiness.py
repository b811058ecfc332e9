"""Can preset X run here, now? GPUs free, the weights reachable (token, local copy, hub), the installed engine's
flags, disk, input assets: each check with its reason, measured rather than assumed (the hub is asked, with a short
timeout). Pure judgement in ``assess``; every probe of the machine is passed in or done at the edges below.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from .. import assets, contract, fileio, hf_settings, work_dirs
from ..engine import command_builder, engine_process, gpu, model_access, tiny_model
from ..engine.capabilities import EngineCapabilities
from ..presets import Preset

DEFAULT_HUB_TIMEOUT_S = 3.0
DISK_HEADROOM_BYTES = 2 * 1024 ** 3  # room for outputs, traces and a partial download's temp files


def hub_reachability(environ: Mapping[str, str], timeout_s: float = DEFAULT_HUB_TIMEOUT_S) -> dict[str, Any]:
    """Ask the hub endpoint (HF_ENDPOINT, else huggingface_hub's default) within ``timeout_s`` in all (a server
    that trickles its answer is cut off too); any HTTP answer, even an error status, means it is reachable.
    Offline settings are reported, not overridden."""
    import http.client
    import urllib.error
    import urllib.request  # with http.client and ssl, ~30 ms: only this check needs them

    from huggingface_hub import constants

    endpoint = environ.get("HF_ENDPOINT") or constants.ENDPOINT
    if hf_settings.offline(environ):
        return {"endpoint": endpoint, "reachable": False, "checked": False, "latency_ms": None,
                "error": "HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE is set: the hub is not asked"}
    start = time.monotonic()
    def head() -> None:
        with urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout_s):
            pass

    try:
        hf_settings.within(timeout_s, head)
        error = None
    except urllib.error.HTTPError:
        error = None  # the server answered
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:  # InvalidURL, BadStatusLine
        error = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
    return {"endpoint": endpoint, "reachable": error is None, "checked": True,
            "latency_ms": round((time.monotonic() - start) * 1000, 1), "error": error}


def _check(ok: bool, reason: str, **facts: Any) -> dict[str, Any]:
    return {"ok": ok, "reason": reason, **facts}


def gpu_check(preset: Preset, inventory: gpu.Inventory, lease_holder: Callable[[str], Any]) -> dict[str, Any]:
    need = preset.num_gpus
    if need == 0:
        return _check(True, "a CPU preset: no GPU needed (the CPU adapter runs the engine)", needed=0, free=[],
                      visible=len(inventory.gpus))
    free = [g.uuid for g in inventory.gpus if gpu.is_idle(g) and lease_holder(g.uuid) is None]
    busy = [g.uuid for g in inventory.gpus if g.uuid not in free]
    if not inventory.gpus:
        return _check(False, f"needs {need} GPU(s); none visible ({inventory.reason})", needed=need, free=[],
                      visible=0)
    ok = len(free) >= need
    return _check(ok, f"needs {need} GPU(s); {len(free)} of {len(inventory.gpus)} idle and not leased"
                  + ("" if ok else f" (busy or leased: {', '.join(busy)})"), needed=need, free=free,
                  visible=len(inventory.gpus))


def engine_check(preset: Preset, caps: EngineCapabilities) -> dict[str, Any]:
    try:
        inv = command_builder.build_invocation(
            preset, command_builder.RunOptions(label="readiness"), caps,
            sglang_cli=[*engine_process.sglang_cli(), "generate"], output_root=Path("/nonexistent/readiness"),
            assets_dir=work_dirs.assets_dir(), caller_env=dict(os.environ),
            model_path="<local model>" if preset.local_model else None,
            asset_filenames=assets.filenames())
    except contract.ToolError as exc:
        return _check(False, f"{exc.code}: {exc.message}", engine=caps.label, code=exc.code)
    return _check(True, f"{caps.label} accepts every flag the preset needs ({len(inv.argv)} tokens)",
                  engine=caps.label, code=None)


def assets_check(preset: Preset) -> dict[str, Any]:
    if not preset.asset:
        return _check(True, "the preset takes no input image", path=None)
    asset = next(a for a in assets.load_manifest() if a.id == preset.asset)
    path = work_dirs.assets_dir() / asset.filename
    if path.is_file():
        return _check(True, f"input {path} is present", path=str(path))
    if asset.source["kind"] == "bundled":  # a run copies it from the bundle (assets.require), no download
        return _check(True, f"input {path} is installed from the bundle when a run starts ({asset.source_text()})",
                      path=str(path))
    return _check(False, f"input {path} is missing: run bench_diffusion_denoise.py --fetch-assets --json",
                  path=str(path))


def model_check(access: model_access.Access, hub: Mapping[str, Any], local_copy: Mapping[str, Any] | None
                ) -> dict[str, Any]:
    if access.decision == "refused":
        return _check(False, access.reason, decision=access.decision)
    if access.decision in ("local", "offline_local_copy") or local_copy:
        return _check(True, access.reason + ("; a complete copy is cached" if local_copy else ""),
                      decision=access.decision)
    if not hub["reachable"]:
        return _check(False, f"{access.reason}, but the weights are not cached and the hub "
                      f"({hub['endpoint']}) is unreachable: {hub['error']}", decision=access.decision)
    return _check(True, access.reason + "; the hub is reachable to download it", decision=access.decision)


def local_dir_check(preset: Preset, model_path: str) -> dict[str, Any]:
    """A --model-path directory is ready when it holds a diffusers pipeline (model_index.json)."""
    path, warnings = tiny_model.local_model_dir(model_path, preset, must_exist=False)
    if any(w["code"] == "model.path_missing" for w in warnings):
        return _check(False, f"--model-path {path} holds no model_index.json", decision="local")
    return _check(True, f"--model-path {path} holds a diffusers pipeline", decision="local")


def disk_check(free_bytes: int | None, what: str, where: Path) -> dict[str, Any]:
    if free_bytes is None:
        return _check(False, f"{where} has no existing parent to measure", free_bytes=None, path=str(where))
    gib = free_bytes / 1024 ** 3
    ok = free_bytes >= DISK_HEADROOM_BYTES
    return _check(ok, f"{gib:.1f} GiB free at {where} ({what}); needs at least "
                  f"{DISK_HEADROOM_BYTES / 1024 ** 3:.0f} GiB of headroom", free_bytes=free_bytes, path=str(where))


def assess(preset: Preset, caps: EngineCapabilities, environ: Mapping[str, str], *,
           hub_timeout_s: float = DEFAULT_HUB_TIMEOUT_S, inventory: gpu.Inventory | None = None,
           model_path: str | None = None) -> dict[str, Any]:
    """Every check for one preset on this machine now; ``ready`` only when all pass. With ``model_path`` (the
    --model-path directory) the model is that directory: no hub, no cache."""
    access = model_access.decide(preset, environ)
    needs_hub = not preset.local_model and model_path is None
    hub = hub_reachability(environ, hub_timeout_s) if needs_hub else {
        "endpoint": None, "reachable": False, "checked": False, "latency_ms": None, "error": "not needed"}
    local_copy = access.local_copy or (model_access.complete_copy(preset.model, [hf_settings.hub_cache(environ)])
                                       if preset.model else None)
    where = work_dirs.output_dir("benchmarks")
    checks = {
        "gpus": gpu_check(preset, inventory if inventory is not None else gpu.read_inventory(),
                          lambda uuid: gpu.lease_holder(uuid, gpu.default_lock_dir(dict(environ)))),
        "model": local_dir_check(preset, model_path) if model_path else model_check(access, hub, local_copy),
        "engine": engine_check(preset, caps),
        "disk": disk_check(fileio.free_bytes(where), "model built locally" if preset.local_model else
                           "the --model-path directory" if model_path else
                           "weights cached" if local_copy else "weights still to download: size known to the hub only",
                           where),
        "assets": assets_check(preset),
    }
    reasons = [f"{name}: {c['reason']}" for name, c in checks.items() if not c["ok"]]
    return {"preset": preset.name, "ready": not reasons, "checks": checks, "hub": hub,
            "token_present": access.token_present, "local_copy": local_copy, "reasons": reasons}
