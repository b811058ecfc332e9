"""One profiled request per arm (profile_run, the engine's own torch.profiler; its timings are never benchmark
numbers), then the profile table of the seed PR (trace compare, baseline against candidate) and the fast-path
classification of the candidate's hot kernels."""

from __future__ import annotations

import json
import shlex
from typing import Any

from .. import contract, fast_paths
from ..campaign import profile_run
from ..trace.analyses.classify import classify_trace
from ..trace.load import load_trace
from ..campaign.profile_compare import profile_table
from ..trace.summary import trace_info
from .steps import Context, Outcome, model_flags, write_document

ARMS = ("baseline", "candidate")
TOP_KERNELS = 15


def _arm_request(ctx: Context, arm: str) -> profile_run.ProfileRequest:
    req = ctx.request
    return profile_run.ProfileRequest(
        label=f"evidence-{arm}", output_root=ctx.folder("profile"), model_path=req.model_path,
        num_profiled_timesteps=req.profile_timesteps, all_stages=True,
        breakable_cuda_graph=req.experiment == "bcg" and arm == "candidate",
        extra_args=req.arm_args(arm))


def _arm_command(ctx: Context, arm: str) -> str:
    request = _arm_request(ctx, arm)
    argv = ["python3", "scripts/profile_diffusion.py", *model_flags(ctx.request), "--label", request.label,
            "--all-stages", "--num-profiled-timesteps", str(request.num_profiled_timesteps), "--output-dir",
            "profile"]
    if request.breakable_cuda_graph:
        argv.append("--breakable-cuda-graph")
    if request.extra_args:
        argv.append(f"--extra-args={shlex.join(request.extra_args)}")
    return shlex.join([*argv, "--json"])


def profile_step(ctx: Context) -> Outcome:
    folder = ctx.folder("profile")
    result: dict[str, Any] = {}
    for arm in ARMS:
        payload = profile_run.run_profile(ctx.preset, ctx.caps, _arm_request(ctx, arm))
        doc = contract.envelope("profile-run.v1", "profile_diffusion",
                                ok=payload["status"] == "valid", **payload)
        write_document(folder / f"profile-{arm}.json", doc)
        rank0 = next((t for t in payload["traces"] if t["rank"] in (0, None)), None)
        result[arm] = {"status": payload["status"], "document": ctx.rel(folder / f"profile-{arm}.json"),
                       "trace": ctx.rel(rank0["path"]) if rank0 else None, "reasons": payload["reasons"]}
    bad = [f"{arm}: {'; '.join(r['reasons']) or r['status']}" for arm, r in result.items() if r["trace"] is None]
    command = " && ".join(_arm_command(ctx, arm) for arm in ARMS)
    return Outcome("failed" if bad else "done", "; ".join(bad) or None, result["candidate"]["document"], command,
                   result)


def trace_analysis_step(ctx: Context) -> Outcome:
    profiles = ctx.results["profile"]
    a_path, b_path = (ctx.root / profiles[arm]["trace"] for arm in ARMS)
    b = load_trace(b_path)
    compared = profile_table(load_trace(a_path), b, ARMS, TOP_KERNELS)
    folder = ctx.folder("trace_analysis")
    compare_doc = contract.envelope("trace-compare.v1", "analyze_trace", markdown_path=None, **compared)
    write_document(folder / "trace-compare.json", compare_doc)
    classified = classify_trace(b, fast_paths.load_registry(), TOP_KERNELS)
    classify_doc = contract.envelope("trace-classify.v1", "analyze_trace", trace=trace_info(b),
                                     registry=str(fast_paths.REGISTRY_PATH.name), **classified)
    write_document(folder / "trace-classify.json", classify_doc)
    a_rel, b_rel = profiles["baseline"]["trace"], profiles["candidate"]["trace"]
    command = (shlex.join(["python3", "scripts/analyze_trace.py", "compare", a_rel, b_rel, "--label-a", "baseline",
                           "--label-b", "candidate", "--json"]) + " && "
               + shlex.join(["python3", "scripts/analyze_trace.py", "classify", b_rel, "--json"]))
    return Outcome("done", None, ctx.rel(folder / "trace-compare.json"), command,
                   {"classify": ctx.rel(folder / "trace-classify.json"),
                    "metrics": json.loads(json.dumps(compared.get("metrics", [])))})
