"""A benchmark request as the package takes it, and the campaigns assembled from it.

The CLI (``cli/bench.py``) and the evidence folder's campaign step (``evidence/steps.py``) each build one frozen
``BenchRequest`` at their edge; everything after that (the campaign plan, the gated-model check, the runners with
every invocation built, the dry-run plan) happens here, once, for both.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable

from .. import assets, contract, work_dirs
from ..engine import gpu, model_access, request_manifest, tiny_model
from . import bench_runner, campaign_context, design, readiness
from ..engine.capabilities import EngineCapabilities
from ..presets import Preset


@dataclasses.dataclass(frozen=True)
class CampaignShape:
    """Which campaign runs: its mode, rounds and samples, and what each arm changes."""

    mode: str = "single"
    rounds: int = design.DEFAULT_ROUNDS
    samples: int = 1
    quality: str | None = None
    bcg: bool = False
    arm_a_args: tuple[str, ...] = ()
    arm_b_args: tuple[str, ...] = ()
    arm_a_overrides: tuple[str, ...] = ()
    arm_b_overrides: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class BenchRequest:
    presets: tuple[Preset, ...]  # chosen and customised (--override, --model-path) at the edge
    shape: CampaignShape
    settings: campaign_context.CampaignSettings
    model_path: str | None = None  # a local pipeline directory asked for
    requests_file: str | None = None  # a request manifest (the engine's own JSONL)
    engine_python: str | None = None  # whose parser reads the manifest
    access_hubs: tuple[Path, ...] | None = None  # where a gated model's local copy may be (None: the caller's hub)
    check_this_machine: bool = False  # a dry run against the installed engine also says whether it can run here


def manifest_for(request: BenchRequest, preset: Preset) -> request_manifest.Manifest | None:
    return request_manifest.for_campaign(request.requests_file, request.engine_python, (preset.width, preset.height))


def plan_campaign(request: BenchRequest, caps: EngineCapabilities,
                  manifest: request_manifest.Manifest | None = None) -> design.Campaign:
    shape = request.shape
    if shape.mode == "matrix" and caps.degraded and not caps.distinct_quality_levels:
        raise contract.PreconditionError("engine.probe_degraded", "the quality x BCG matrix needs the engine's quality "
                                         "levels, which a degraded probe cannot read", caps.degraded_reason())
    return design.plan(shape.mode, rounds=shape.rounds, samples=shape.samples, quality=shape.quality, bcg=shape.bcg,
                         arm_a_args=shape.arm_a_args, arm_b_args=shape.arm_b_args,
                         arm_a_overrides=shape.arm_a_overrides, arm_b_overrides=shape.arm_b_overrides,
                         engine_qualities=list(caps.distinct_quality_levels) or None, manifest=manifest)


def new_runner(request: BenchRequest, preset: Preset, caps: EngineCapabilities, *, build_model: bool,
               manifest: request_manifest.Manifest | None = None) -> bench_runner.CampaignRunner:
    """Every invocation of one preset's campaign, built (and refused, if the engine lacks a flag or a gated model
    cannot be reached) up front: the one place a campaign runner is made."""
    preset = model_access.require(preset, os.environ, list(request.access_hubs) if request.access_hubs is not None
                                  else None)
    model_path, warnings = tiny_model.model_location(preset, request.model_path, build=build_model)
    ctx = campaign_context.CampaignContext.build(preset, plan_campaign(request, caps, manifest), request.settings,
                                                 caps, model_path=model_path)
    runner = bench_runner.CampaignRunner(ctx, asset_filenames=assets.filenames())
    runner.warnings += [w for w in warnings if build_model]  # a plan lists them itself
    return runner


def assemble(request: BenchRequest,
             probe: Callable[[], EngineCapabilities]) -> list[tuple[Preset, bench_runner.CampaignRunner]]:
    """Each preset's runner, built and holding its label, in this order: every manifest line checked (before any
    engine is probed), the engine probed once, then each command built and its label claimed, so a refusal comes
    before anything heavy (torch, NVML, a model build) and before any run."""
    manifests = [manifest_for(request, p) for p in request.presets]
    caps = probe()
    runners = []
    for preset, manifest in zip(request.presets, manifests, strict=True):
        runner = new_runner(request, preset, caps, build_model=False, manifest=manifest)
        runner.check_fresh()
        runners.append((preset, runner))
    return runners


def plan(request: BenchRequest, caps: EngineCapabilities) -> dict[str, Any]:
    """The bench-plan.v1 payload: every run's command, each preset the engine or this machine refuses, and the
    engine mode each campaign would take; nothing is built or run."""
    inventory, runs, refusals, warnings, modes = None, [], [], [], []
    for preset in request.presets:
        warnings += tiny_model.model_location(preset, request.model_path, build=False)[1]
        try:
            runner = new_runner(request, preset, caps, build_model=False, manifest=manifest_for(request, preset))
        except contract.UsageError:
            raise
        except contract.ToolError as exc:
            refusals.append({"preset": preset.name, "code": exc.code, "message": exc.message, "hint": exc.hint})
            continue
        runs += [inv.to_json() for inv in runner.invocations]
        modes.append({"preset": preset.name, **runner.engine_mode})
        if request.check_this_machine and preset.num_gpus:  # a plan for this machine: can it run here?
            inventory = inventory or gpu.read_inventory()
            check = readiness.gpu_check(preset, inventory, lambda uuid: None)  # leases matter at run time only
            if not check["ok"]:
                refusals.append({"preset": preset.name,
                                 "code": "gpu.none" if not check["visible"] else "gpu.not_enough_idle",
                                 "message": f"cannot run here: {check['reason']}",
                                 "hint": f"check_readiness.py --model {preset.name} says everything it needs; plan for "
                                         "another machine with --engine-capabilities recent"})
    return {"engine": caps.to_json(), "output_dir": str(request.settings.output_root),
            "assets_dir": str(work_dirs.assets_dir()), "runs": runs, "refusals": refusals, "warnings": warnings,
            "engine_modes": modes}
