"""One profiled request: a preset run under the engine's own torch.profiler, judged by the campaigns' request path
and the trace rule, its trace files listed per rank. The profiler distorts latency, so this never yields benchmark
numbers. Used by profile_diffusion.py and by collect_pr_evidence.py (one profiled request per arm)."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path
from typing import Any

from .. import assets, contract, fileio, presets, work_dirs
from ..engine import command_builder, engine_process, gpu, tiny_model
from . import campaign_context, request_setup
from ..judging import log_markers, request_path
from ..judging.cell import Cell
from ..engine.capabilities import EngineCapabilities
from . import profile_compare

TRACE_SUFFIXES = (".trace.json.gz", ".trace.json", ".pt.trace.json", ".pt.trace.json.gz")
RANK_IN_NAME = re.compile(r"rank(\d+)")
NOTE = "profiled timings are distorted by the profiler; measure with bench_diffusion_denoise.py"


@dataclasses.dataclass(frozen=True)
class ProfileRequest:
    """What to profile: the preset's request plus these flags, its files below ``output_root/<run>``."""

    label: str
    output_root: Path
    model_path: str | None = None  # --model-path asked for (a local pipeline directory)
    num_profiled_timesteps: int = 2
    all_stages: bool = False
    quality: str | None = None
    breakable_cuda_graph: bool = False
    warmup: bool = True
    extra_args: tuple[str, ...] = ()
    timeout_s: float = 3600.0
    echo: bool = False


def profile_invocation(preset: presets.Preset, caps: EngineCapabilities, request: ProfileRequest, *,
                       build_model: bool) -> tuple[command_builder.Invocation, Path, dict[str, str]]:
    """The profiled run's invocation, its trace directory, and the profiler-directory variables to set."""
    if request.num_profiled_timesteps < 1:
        raise contract.UsageError("usage.bad_timesteps", "--num-profiled-timesteps must be at least 1", "use 2")
    profile_flags = ["--profile", "--num-profiled-timesteps", str(request.num_profiled_timesteps)]
    if request.all_stages:
        profile_flags.append("--profile-all-stages")
    model_path = tiny_model.model_location(preset, request.model_path, build=build_model)[0]
    options = command_builder.RunOptions(label=request.label, arm="profile", quality=request.quality,
                                         warmup=request.warmup, breakable_cuda_graph=request.breakable_cuda_graph,
                                         extra_args=(*request.extra_args, *profile_flags,
                                                     *campaign_context.port_args_for(caps)))
    invocation = command_builder.build_invocation(
        preset, options, caps, sglang_cli=[*engine_process.sglang_cli(caps.python), "generate"],
        output_root=request.output_root, assets_dir=work_dirs.assets_dir(), caller_env=dict(os.environ),
        model_path=str(model_path) if model_path else None,
        asset_filenames=assets.filenames())
    if not caps.profiler_dir_env:
        raise contract.PreconditionError("engine.profiler_dir_unknown", f"{caps.label}: no profiler directory "
                                         "variable is known", "re-run with --refresh-probe, or upgrade the bundle")
    trace_dir = invocation.run_dir / "traces"
    return invocation, trace_dir, {name: str(trace_dir) for name in caps.profiler_dir_env}


def find_traces(trace_dir: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted(p for p in trace_dir.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES)):
        rank = RANK_IN_NAME.search(path.name)
        found.append({"rank": int(rank.group(1)) if rank else None, "path": str(path), "bytes": path.stat().st_size,
                      "sha256": fileio.sha256_file(path)})
    return sorted(found, key=lambda t: (t["rank"] is None, t["rank"] or 0, t["path"]))


def describe(preset: presets.Preset, request: ProfileRequest, invocation: command_builder.Invocation,
             trace_dir: Path, profiler_env: dict[str, str]) -> dict[str, Any]:
    """The fields every profile-run.v1 document carries, planned or run."""
    return {"preset": preset.name, "label": request.label, "argv": list(invocation.argv),
            "profiler_env": profiler_env, "trace_dir": str(trace_dir), "run_dir": str(invocation.run_dir),
            "timings_are_benchmark_numbers": False, "note": NOTE}


def run_profile(preset: presets.Preset, caps: EngineCapabilities, request: ProfileRequest) -> dict[str, Any]:
    """Run the profiled request; returns the profile-run.v1 payload (status, traces, log, gate, reasons)."""
    invocation, trace_dir, profiler_env = profile_invocation(preset, caps, request, build_model=True)
    if invocation.run_dir.exists():
        raise contract.PreconditionError("run.label_taken", f"{invocation.run_dir} exists already",
                                         "choose a new --label; traces are never overwritten")
    inventory = gpu.read_inventory()
    request_setup.require_gpus(preset.name, preset.num_gpus, inventory,
                               "run on a GPU machine, or profile tiny-flux-cpu")
    switches_checked = request_setup.EngineEnv.of(os.environ, use_cpu_adapter=not inventory.gpus)
    print(f"[profile] {preset.name}: running with the engine's profiler; traces go to {trace_dir}", file=sys.stderr)
    cell = Cell(index=0, arm=preset.name)  # judged by the campaigns' own request path, then the trace rule too

    def run(engine_env: request_setup.EngineEnv, foreign_check=None) -> None:
        prepared = request_setup.prepare(invocation, engine_env, log_markers.markers_for_version(caps.version),
                                         extra_env=profiler_env, profiling=True)
        trace_dir.mkdir(parents=True)
        request_path.run_cold(cell, argv=prepared.argv, env=dict(prepared.env), run_dir=prepared.run_dir,
                              gate=prepared.gate, perf_dump_path=invocation.perf_dump_path,
                              output_dir=invocation.output_dir, output_stem=invocation.output_file_stem,
                              task=preset.task, timeout_s=request.timeout_s,
                              echo=sys.stderr if request.echo else None, foreign_check=foreign_check,
                              what=f"{preset.name}: the profiled request (engine start, request, exit)")

    if preset.num_gpus > 0:
        with gpu.campaign_devices(preset.num_gpus, f"{preset.name}:{request.label}:profile", inventory) as (
                visible, uuids):
            run(dataclasses.replace(switches_checked, cuda_visible_devices=visible),
                lambda: gpu.foreign_processes(uuids, own_pids=set()))
    else:
        run(switches_checked)
    traces = find_traces(trace_dir)
    host = cell.gates["host"]
    for trace in traces:  # analyze_trace.py compare reads these to refuse a verdict on a contended pair
        record = profile_compare.sidecar_document("profile_diffusion", trace["path"], trace["sha256"], host)
        trace["host_load_path"] = str(fileio.atomic_write_text(profile_compare.sidecar_path(trace["path"]),
                                                               contract.dumps(record) + "\n"))
    reasons = list(cell.reasons)
    if not traces:
        reasons.append(f"artifacts.no_trace: no *.trace.json[.gz] under {trace_dir}")
    status = "valid" if not reasons else "invalid"
    return {"status": status, "traces": traces, "log_path": str(Path(cell.log_path)), "gate": cell.gates["log"],
            "reasons": reasons, "host_load": host, **describe(preset, request, invocation, trace_dir, profiler_env)}
