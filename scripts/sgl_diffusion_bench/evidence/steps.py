"""What each step of the evidence runs, each as the package's own function (never a subprocess of our CLI). A step
writes only below its own folder (``<out>/<step>/``) and returns an ``Outcome``; a step that cannot run here says
why and is recorded as skipped."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any, Callable

from .. import contract, fileio, model_cache
from ..engine import capabilities, gpu, tiny_model
from ..campaign import bcg_replay, bench_request, bench_runner, campaign_context, campaign_session, sequential
from ..presets import Preset
from .request import EvidenceRequest

WARMUP_REQUESTS = 1  # each warm engine serves one uncounted request first


@dataclasses.dataclass
class Outcome:
    status: str  # done | skipped | failed
    reason: str | None = None
    document: str | None = None  # the step's main document, relative to the folder
    command: str | None = None  # the shell command that reproduces the step with this bundle's scripts
    result: dict[str, Any] | None = None


@dataclasses.dataclass
class Context:
    """What every step reads: the folder, the request, the preset as customised, the engine, the preflight's
    readiness payload (assessed once per run), earlier results."""

    root: Path
    request: EvidenceRequest
    preset: Preset
    caps: capabilities.EngineCapabilities
    readiness: dict[str, Any] = dataclasses.field(default_factory=dict)
    results: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def folder(self, step: str) -> Path:
        return self.root / step

    def rel(self, path: Path | str) -> str:
        return Path(path).resolve().relative_to(self.root.resolve()).as_posix()


def write_document(path: Path, doc: dict[str, Any]) -> None:
    contract.check_document(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    fileio.atomic_write_text(path, contract.dumps(doc) + "\n")


def model_flags(request: EvidenceRequest) -> list[str]:
    flags = ["--model", request.model]
    if request.model_path:
        flags += ["--model-path", request.model_path]
    for key, value in request.overrides.items():
        flags += ["--override", f"{key}={value}"]
    return flags


def readiness_step(ctx: Context) -> Outcome:
    payload = ctx.readiness
    doc = contract.envelope("readiness.v1", "check_readiness", ok=payload["ready"], **payload)
    write_document(ctx.folder("readiness") / "readiness.json", doc)
    command = shlex.join(["python3", "scripts/check_readiness.py", "--model", ctx.request.model,
                          *(["--model-path", ctx.request.model_path] if ctx.request.model_path else []), "--json"])
    if not payload["ready"]:
        return Outcome("failed", "; ".join(payload["reasons"]), "readiness/readiness.json", command)
    return Outcome("done", None, "readiness/readiness.json", command, {"ready": True})


def campaign_mode(request: EvidenceRequest) -> str:
    return "abba" if request.experiment == "bcg" else "ab"


def campaign_runner(ctx: Context) -> bench_runner.CampaignRunner:
    """The warm A/B/B/A campaign until a verdict or the budget, as bench_diffusion_denoise.py --until-verdict."""
    req = ctx.request
    settings = campaign_context.CampaignSettings(
        label="evidence", output_root=ctx.folder("campaign"), threshold_pct=req.threshold_pct, engine_mode="warm",
        extra_args=req.common_args, engine_overlap=req.engine_overlap,
        warmup_requests=WARMUP_REQUESTS, write_report=False,
        model_cache_root=Path(req.model_cache_root) if req.model_cache_root else None,
        cleanup_model_cache=req.model_cache_root is not None,
        stopping=sequential.StoppingRule(req.threshold_pct, req.budget_rounds),
        time_budget_s=req.budget_minutes * 60 if req.budget_minutes else None,
        request={"model_path": req.model_path, "overrides": dict(req.overrides), "extra_args": list(req.common_args)})
    shape = bench_request.CampaignShape(mode=campaign_mode(req), rounds=req.budget_rounds, samples=req.samples,
                                        arm_a_args=tuple(req.baseline_args), arm_b_args=tuple(req.candidate_args))
    request = bench_request.BenchRequest(presets=(ctx.preset,), shape=shape, settings=settings,
                                         model_path=req.model_path,
                                         access_hubs=() if req.model_cache_root else None)  # as its command would
    return bench_request.new_runner(request, ctx.preset, ctx.caps, build_model=False)


def campaign_command(ctx: Context) -> str:
    req = ctx.request
    argv = ["python3", "scripts/bench_diffusion_denoise.py", *model_flags(req), "--campaign", campaign_mode(req),
            "--engine", "warm", "--until-verdict", "--budget-rounds", str(req.budget_rounds), "--samples",
            str(req.samples), "--threshold-pct", f"{req.threshold_pct:g}", "--label", "evidence", "--output-dir",
            "campaign"]
    if req.budget_minutes:
        argv += ["--budget-minutes", f"{req.budget_minutes:g}"]
    if req.common_args:
        argv.append(f"--extra-args={shlex.join(req.common_args)}")
    if req.engine_overlap != "auto":
        argv += ["--engine-overlap", req.engine_overlap]
    argv += [f"--arm-{letter}-args={shlex.join(args)}" for letter, args in (("a", req.baseline_args),
                                                                            ("b", req.candidate_args)) if args]
    if req.model_cache_root:
        argv += ["--model-cache-root", req.model_cache_root, "--cleanup-model-cache"]
    return shlex.join([*argv, "--json"])


def campaign_step(ctx: Context) -> Outcome:
    runner = campaign_runner(ctx)
    runner.check_fresh()
    outcome = campaign_session.run([(ctx.preset, runner)], "evidence",
                                   lambda preset: tiny_model.model_location(preset, ctx.request.model_path, build=True))
    if outcome.interrupted:
        raise KeyboardInterrupt  # the partial report is on disk; the manifest records the interruption
    doc = outcome.documents[0]
    comparison = doc["summary"]["comparison"] or {}
    result = {"report": ctx.rel(doc["plan"]["report_path"]), "verdict": comparison.get("verdict"),
              "engine_starts": doc["engines"].get("engine_starts"),
              "cells": len(doc["cells"]), "valid_cells": sum(c["status"] == "valid" for c in doc["cells"])}
    status = "done" if doc["cells"] and result["valid_cells"] else "failed"
    return Outcome(status, None if status == "done" else "no cell of the campaign is valid", result["report"],
                   campaign_command(ctx), result)


def campaign_report(ctx: Context) -> dict[str, Any]:
    import json

    return json.loads((ctx.root / ctx.results["campaign"]["report"]).read_text(encoding="utf-8"))


def output_identity_step(ctx: Context) -> Outcome:
    """The campaign's own output check (bytes at identity levels, SSIM/PSNR and the worst frame at lossy ones)."""
    report = campaign_report(ctx)
    quality = report["summary"]["output_quality"]
    if quality is None:
        return Outcome("failed", "the campaign recorded no outputs", ctx.results["campaign"]["report"])
    checks = [{"kind": c["kind"], "passed": c["passed"], **({"identical": c["identical"], "sha256s": sorted(
        {s for g in c["groups"] for s in g["sha256s"]})} if c["kind"] == "byte_identity" else {
        "arm": c["arm"], "worst_ssim": min((r["ssim"] for r in c["results"]), default=None)})}
        for c in quality["checks"]]
    return Outcome("done" if quality["passed"] else "failed", None if quality["passed"] else
                   "the outputs break their quality level's contract", ctx.results["campaign"]["report"], None,
                   {"passed": quality["passed"], "checks": checks, "source": "summary.output_quality of the campaign"})


def bcg_replay_step(ctx: Context) -> Outcome:
    """--bcg-replay, when an arm uses BCG and the machine has the GPUs a CUDA graph needs."""
    if ctx.request.experiment != "bcg" and not any("breakable-cuda-graph" in a for a in
                                                   (*ctx.request.baseline_args, *ctx.request.candidate_args)):
        return Outcome("skipped", "no arm uses breakable CUDA graphs")
    if not gpu.read_inventory().gpus:
        return Outcome("skipped", "no GPU here: BCG replay captures CUDA graphs, which need one")
    folder = ctx.folder("bcg_replay")
    doc = bcg_replay.run_command(ctx.preset, ctx.caps, label="evidence-replay", bcg=True, output_root=folder,
                                 model_path=tiny_model.model_location(ctx.preset, ctx.request.model_path,
                                                                   build=False)[0],
                                 timeout_s=campaign_context.DEFAULT_CELL_TIMEOUT_S,
                                 build_local_model=lambda: tiny_model.model_location(ctx.preset, ctx.request.model_path,
                                                                                  build=True), echo=False,
                                 extra_args=ctx.request.common_args)
    write_document(folder / "bcg-replay.json", doc)
    command = shlex.join(["python3", "scripts/bench_diffusion_denoise.py", *model_flags(ctx.request),
                          "--bcg-replay", *([f"--extra-args={shlex.join(ctx.request.common_args)}"]
                                            if ctx.request.common_args else []), "--json"])
    return Outcome("done" if doc["ok"] else "failed", None if doc["ok"] else "; ".join(doc["problems"]),
                   ctx.rel(folder / "bcg-replay.json"), command, {"ok": doc["ok"], "problems": doc["problems"]})


def cleanup_step(ctx: Context) -> Outcome:
    """The campaign's isolated cache was deleted and ledgered; an independent re-check of that ledger now."""
    if ctx.request.model_cache_root is None:
        return Outcome("skipped", "no --model-cache-root: the run used the caller's caches, so it deleted nothing")
    ledger = ctx.folder("campaign") / "cleanup.jsonl"
    result = model_cache.verify_ledger(ledger)
    doc = contract.envelope("cache-verify.v1", "cleanup_model_cache", ok=result["residue_count"] == 0,
                            ledger=str(ledger.resolve()), **result)
    write_document(ctx.folder("cleanup") / "cache-verify.json", doc)
    command = shlex.join(["python3", "scripts/cleanup_model_cache.py", "verify", "--ledger", "campaign/cleanup.jsonl",
                          "--json"])
    ok = doc["ok"] and result["recorded_failures"] == 0
    return Outcome("done" if ok else "failed", None if ok else f"{result['residue_count']} cache dir(s) left",
                   "cleanup/cache-verify.json", command,
                   {"residue_count": result["residue_count"], "entries": result["entry_count"]})


StepFunction = Callable[[Context], Outcome]
