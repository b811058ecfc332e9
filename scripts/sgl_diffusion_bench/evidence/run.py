"""``collect_pr_evidence.py run``: every step in order into one folder, resumable. A folder made for another
request, or one that is not an evidence folder, is refused before anything runs; a machine the request cannot run
on is refused (exit 3) before anything is written. On resume a finished step whose files still hash as recorded is
kept; the first step that is not, and every step after it, runs again. Ctrl-C or a kill (SIGTERM) leaves a manifest
naming the step it interrupted."""

from __future__ import annotations

import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from .. import contract, presets
from ..engine import capabilities, engine_probe, gpu, tiny_model
from ..campaign import readiness
from . import manifest, profiling, render, steps
from .request import EvidenceRequest, differing_fields, parallel_layout

STEP_FUNCTIONS: dict[str, steps.StepFunction] = {
    "readiness": steps.readiness_step, "campaign": steps.campaign_step,
    "output_identity": steps.output_identity_step, "profile": profiling.profile_step,
    "trace_analysis": profiling.trace_analysis_step, "bcg_replay": steps.bcg_replay_step,
    "cleanup": steps.cleanup_step,
}


CARRIED_ON_REDO = {"campaign": ("cleanup.jsonl",)}  # the ledger of an interrupted attempt's cache stays on record


def check_folder(root: Path, request: EvidenceRequest) -> dict[str, Any] | None:
    """The folder's manifest when it is this request's (None for a new or empty folder); refusals otherwise."""
    if root.exists() and not root.is_dir():
        raise contract.UsageError("usage.output_unwritable", f"--out {root} is a file", "choose a folder for --out")
    existing = manifest.load(root) if root.is_dir() else None
    if existing is None:
        if root.is_dir() and any(root.iterdir()):
            raise contract.UsageError("evidence.foreign_folder", f"{root} is not empty and has no {manifest.NAME}: "
                                      "not an evidence folder", "choose a new or empty --out folder")
        return None
    if existing["request_sha256"] != request.sha256():
        fields = differing_fields(existing["request"], request.to_json())
        raise contract.UsageError("evidence.other_request", f"{root} holds the evidence of another request: "
                                  f"{', '.join(fields) or 'the request hash'} differ(s)",
                                  "run the same request to resume it, or choose a new --out")
    foreign = foreign_files(root, existing)
    if foreign:
        raise contract.UsageError("evidence.foreign_file", f"{root} holds file(s) its manifest does not record: "
                                  f"{', '.join(foreign[:5])}{' ...' if len(foreign) > 5 else ''}; a step that "
                                  "runs again would delete them", "move them out of the folder, then run again")
    return existing


def foreign_files(root: Path, doc: dict[str, Any]) -> list[str]:
    """Files nobody recorded, outside the folders of unfinished steps (whose leftovers a redo replaces)."""
    recorded = manifest.recorded_paths(doc) | {manifest.NAME, render.MARKDOWN_NAME, render.PLOT_NAME}
    unfinished = {s["name"] for s in doc["steps"] if s["status"] not in manifest.FINISHED}
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(root).as_posix()
        if rel not in recorded and rel.partition("/")[0] not in unfinished:
            found.append(rel)
    return found


def check_writable(root: Path) -> None:
    """Refuse an --out that cannot be made, before anything (the engine probe included) runs; creates nothing."""
    ancestor = root
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
        raise contract.UsageError("usage.output_unwritable", f"cannot create --out {root}: {ancestor} is not a "
                                  "writable folder", "choose a writable folder for --out")


def ensure_writable(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".write-check"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise contract.UsageError("usage.output_unwritable", f"cannot write into --out {root}: "
                                  f"{exc.strerror or exc}", "choose a writable folder for --out") from None


def preflight(preset: presets.Preset, request: EvidenceRequest, caps: capabilities.EngineCapabilities
              ) -> dict[str, Any]:
    """Can the request run here? readiness (GPUs, model, engine flags, disk, assets) and a GPU for a BCG arm."""
    payload = readiness.assess(preset, caps, dict(os.environ), model_path=request.model_path)
    if not payload["ready"]:
        raise contract.PreconditionError("evidence.not_ready", f"{preset.name} cannot run here: "
                                         + "; ".join(payload["reasons"]),
                                         f"check_readiness.py --model {preset.name} says what is missing")
    if request.experiment == "bcg" and not gpu.read_inventory().gpus:
        raise contract.PreconditionError("evidence.bcg_needs_gpu", "--bcg compares eager with breakable CUDA "
                                         "graphs, which need a GPU; none is visible here",
                                         "run on a GPU machine, or describe a CPU change with --candidate-args")
    return payload


def _machine() -> dict[str, Any]:
    inventory = gpu.read_inventory()
    return {"platform": platform.platform(), "python": platform.python_version(), "cpu_count": os.cpu_count(),
            "gpus": [{"index": g.index, "name": g.name, "memory_total_bytes": g.memory_total_bytes}
                     for g in inventory.gpus]}


def _now() -> str:
    return contract.utc_now()


def run(root: Path, request: EvidenceRequest) -> dict[str, Any]:
    preset = presets.customised([presets.get_preset(request.model)], [f"{k}={v}" for k, v in
                                                                      request.overrides.items()],
                                request.model_path)[0]
    existing = check_folder(root, request)
    check_writable(root)
    tiny_model.build_beside_probe(preset, request.model_path)
    caps = engine_probe.probe_engine().capabilities
    ready = preflight(preset, request, caps)
    ensure_writable(root)
    doc = existing or manifest.new_manifest(root, request.to_json(), request.sha256())
    doc.update(out_dir=str(root.resolve()), versions={"tool": contract.tool_info(manifest.TOOL)["version"],
                                                      "engine": caps.version, "engine_dir": caps.package_dir},
               machine=_machine(), layout=parallel_layout(preset, request), state="running", interrupted_step=None)
    ctx = steps.Context(root=root.resolve(), request=request, preset=preset, caps=caps, readiness=ready)
    redo = False
    for name in manifest.STEPS:
        record = manifest.step(doc, name)
        if not redo and record["status"] in manifest.FINISHED and not manifest.stale_files(root, record["files"]):
            ctx.results[name] = {**(record["result"] or {}), "command": record["command"]}
            continue
        stale = manifest.stale_files(root, record["files"]) if record["status"] in manifest.FINISHED else []
        redo = True
        _run_step(ctx, doc, record, STEP_FUNCTIONS[name])
        if stale and record["reason"] is None:
            record["reason"] = f"run again: {', '.join(stale[:3])} changed or went missing since it finished"
        if record["status"] == "failed":
            for later in manifest.STEPS[manifest.STEPS.index(name) + 1:]:
                manifest.step(doc, later).update(manifest.new_step(later), status="pending",
                                                 reason=f"not run: step {name} failed")
            doc["state"] = "failed"
            break
        ctx.results[name] = {**(record["result"] or {}), "command": record["command"]}
    else:
        doc["state"] = "complete"
    doc["ok"] = doc["state"] == "complete"
    doc["rendered"] = render.write(ctx.root, doc)
    manifest.save(root, doc)
    return doc


def _run_step(ctx: steps.Context, doc: dict[str, Any], record: dict[str, Any], function: steps.StepFunction) -> None:
    name = record["name"]
    folder = ctx.folder(name)
    kept = {n: (folder / n).read_bytes() for n in CARRIED_ON_REDO.get(name, ()) if (folder / n).is_file()}
    if folder.exists():
        shutil.rmtree(folder)  # a step's folder holds only what the step wrote: a redo starts clean
    for file_name, content in kept.items():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / file_name).write_bytes(content)
    record.update(status="running", attempts=record["attempts"] + 1, started_at=_now(), finished_at=None,
                  wall_s=None, reason=None, document=None, command=None, files=[], result=None)
    manifest.save(ctx.root, doc)
    print(f"[evidence] step {name}: running", file=sys.stderr, flush=True)
    start = time.monotonic()
    try:
        outcome = function(ctx)
    except KeyboardInterrupt:
        record.update(status="interrupted", finished_at=_now(), wall_s=round(time.monotonic() - start, 3),
                      reason="interrupted (Ctrl-C or SIGTERM): the step runs again on resume",
                      files=manifest.records_under(ctx.root, folder))
        doc.update(state="interrupted", interrupted_step=name, ok=False)
        manifest.save(ctx.root, doc)
        _say_end(record)
        raise
    except contract.ToolError as exc:
        outcome = steps.Outcome("failed", f"{exc.code}: {exc.message}")
    record.update(status=outcome.status, reason=outcome.reason, document=outcome.document, command=outcome.command,
                  result=outcome.result, finished_at=_now(), wall_s=round(time.monotonic() - start, 3),
                  files=manifest.records_under(ctx.root, folder))
    manifest.save(ctx.root, doc)
    _say_end(record)


def _say_end(record: dict[str, Any]) -> None:
    """A step's end, as its 'running' line announced it: the status, its time and, unless done, why."""
    why = f": {record['reason']}" if record["status"] != "done" and record.get("reason") else ""
    print(f"[evidence] step {record['name']}: {record['status']} after {record['wall_s']:.1f} s{why}",
          file=sys.stderr, flush=True)
