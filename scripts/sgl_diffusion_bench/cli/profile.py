"""profile_diffusion: run a preset under the engine's own torch.profiler and return the trace files per rank.

The profiler changes latency a lot, so a profiled run never yields benchmark numbers: this tool reports traces,
not timings (take those from bench_diffusion_denoise.py on an unprofiled run). Feed the traces to
analyze_trace.py (hotspots, compare, classify).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from .. import (assets, bench_runner, command_builder, contract, engine_args, engine_process, env, fileio, gpu,
               log_gates, log_markers, presets, request_path, selftest)
from ..cell import Cell
from ..trace import host_record
from . import _engine_args, _runner
from .bench import engine_capabilities

TOOL = "profile_diffusion"
TRACE_SUFFIXES = (".trace.json.gz", ".trace.json", ".pt.trace.json", ".pt.trace.json.gz")
RANK_IN_NAME = re.compile(r"rank(\d+)")
EPILOG = """examples:
  python3 scripts/profile_diffusion.py --model tiny-flux-cpu --label prof --dry-run --json
  python3 scripts/profile_diffusion.py --model flux --label eager-prof --all-stages --num-profiled-timesteps 2 --json
  python3 scripts/analyze_trace.py hotspots <trace from the "traces" list> --json

""" + _runner.EXIT_CODES_EPILOG


def build_parser() -> _runner.Parser:
    parser = _runner.new_parser(TOOL, __doc__.strip(), EPILOG)
    parser.add_argument("--model", default="tiny-flux-cpu",
                        help="preset (see bench_diffusion_denoise.py --list-models)")
    parser.add_argument("--model-path", help="profile the preset's request on this local pipeline directory")
    parser.add_argument("--override", action="append", default=[], metavar="FIELD=VALUE",
                        help="replace a preset request field (repeatable), as in bench_diffusion_denoise.py")
    parser.add_argument("--label", default="profile", help="names this run's files: letters, digits, '-'")
    parser.add_argument("--output-dir", help="default: <work root>/outputs/diffusion_profiles")
    parser.add_argument("--all-stages", action="store_true", help="profile every stage, not only denoising")
    parser.add_argument("--num-profiled-timesteps", type=_runner.bounded_int(1, 1000), default=2,
                        help="denoise steps to record after warmup (default 2, as in the seed PR's traces)")
    parser.add_argument("--quality", help="a level the engine's --quality accepts (0.5.23: exact, lossless, high)")
    parser.add_argument("--breakable-cuda-graph", action="store_true", help="profile the BCG path")
    parser.add_argument("--no-warmup", action="store_true", help="no warmup request (start-up studies only)")
    parser.add_argument("--extra-args", default="", help="more sglang generate arguments, one shell-quoted string")
    parser.add_argument("--engine-capabilities", default="installed", help="installed | recent | engine.v1 file")
    parser.add_argument("--refresh-probe", action="store_true", help="ignore the cached engine probe")
    _engine_args.add_engine_options(parser)
    parser.add_argument("--timeout-s", type=_runner.bounded_float(0, 7 * 86400, low_open=True), default=3600.0,
                        help="stop the engine after this many seconds")
    parser.add_argument("--echo-engine", action="store_true", help="stream the engine's log lines to stderr")
    parser.add_argument("--dry-run", action="store_true", help="print the command and trace directory; run nothing")
    return parser


def profile_invocation(args: argparse.Namespace, preset: presets.Preset, caps, *, build_model: bool
                       ) -> tuple[command_builder.Invocation, Path, dict[str, str]]:
    """The profiled run's invocation, its trace directory, and the profiler-directory variables to set."""
    if args.num_profiled_timesteps < 1:
        raise contract.UsageError("usage.bad_timesteps", "--num-profiled-timesteps must be at least 1", "use 2")
    try:
        extra = shlex.split(args.extra_args)
    except ValueError as exc:
        raise contract.UsageError("usage.bad_extra_args", f"--extra-args does not parse: {exc}", "quote it") from exc
    profile_flags = ["--profile", "--num-profiled-timesteps", str(args.num_profiled_timesteps)]
    if args.all_stages:
        profile_flags.append("--profile-all-stages")
    output_root = Path(args.output_dir).resolve() if args.output_dir else env.output_dir("profiles")
    model_path = presets.model_location(preset, args.model_path, build=build_model)[0]
    options = command_builder.RunOptions(label=args.label, arm="profile", quality=args.quality,
                                         warmup=not args.no_warmup, breakable_cuda_graph=args.breakable_cuda_graph,
                                         extra_args=(*extra, *profile_flags, *bench_runner.port_args_for(caps)))
    invocation = command_builder.build_invocation(
        preset, options, caps, sglang_cli=[*engine_process.sglang_cli(caps.python), "generate"],
        output_root=output_root,
        assets_dir=env.assets_dir(), caller_env=dict(os.environ),
        model_path=str(model_path) if model_path else None,
        asset_filenames={a.id: a.filename for a in assets.load_manifest()})
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


def handle(args: argparse.Namespace) -> _runner.Result:
    preset = presets.customised([presets.get_preset(args.model)], args.override, args.model_path)[0]
    caps = engine_capabilities(args)
    invocation, trace_dir, profiler_env = profile_invocation(args, preset, caps, build_model=not args.dry_run)
    base = {"preset": preset.name, "label": args.label, "argv": list(invocation.argv),
            "profiler_env": profiler_env, "trace_dir": str(trace_dir), "run_dir": str(invocation.run_dir),
            "timings_are_benchmark_numbers": False,
            "note": "profiled timings are distorted by the profiler; measure with bench_diffusion_denoise.py"}
    if args.dry_run:
        doc = contract.envelope("profile-run.v1", TOOL, status="planned", traces=[], log_path=None, gate=None,
                                reasons=[], host_load=None, **base)
        return _runner.Result(doc, " \\\n  ".join(map(shlex.quote, invocation.argv)))
    if invocation.run_dir.exists():
        raise contract.PreconditionError("run.label_taken", f"{invocation.run_dir} exists already",
                                         "choose a new --label; traces are never overwritten")
    inventory = gpu.read_inventory()
    if preset.num_gpus > 0 and not inventory.gpus:
        raise contract.PreconditionError("gpu.none", f"preset {preset.name!r} needs {preset.num_gpus} GPU(s); "
                                         f"{inventory.reason}", "run on a GPU machine, or profile tiny-flux-cpu")
    trace_dir.mkdir(parents=True)
    if invocation.config_path is not None:
        invocation.config_path.write_text(invocation.config_content or "", encoding="utf-8")
    child = {**invocation.child_env(os.environ), **profiler_env}
    if not inventory.gpus:
        child = engine_process.cpu_adapter_env(child, bench_runner.adapter_switches_off(os.environ))
    gate = log_gates.RequestLogGate(log_markers.markers_for_version(caps.version), quality=invocation.quality_level,
                                    bcg_expected=engine_args.requests_bcg(invocation.argv), require_native=True,
                                    profiling=True)
    print(f"[profile] {preset.name}: running with the engine's profiler; traces go to {trace_dir}", file=sys.stderr)
    request = Cell(index=0, arm=preset.name)  # judged by the campaigns' own request path, then the trace rule too

    def run(foreign_check=None) -> None:
        request_path.run_cold(request, argv=invocation.argv, env=child, run_dir=invocation.run_dir, gate=gate,
                              perf_dump_path=invocation.perf_dump_path, output_dir=invocation.output_dir,
                              output_stem=invocation.output_file_stem, task=preset.task, timeout_s=args.timeout_s,
                              echo=sys.stderr if args.echo_engine else None, foreign_check=foreign_check)

    if preset.num_gpus > 0:
        with gpu.campaign_devices(preset.num_gpus, f"{preset.name}:{args.label}:profile", inventory) as (visible,
                                                                                                       uuids):
            child["CUDA_VISIBLE_DEVICES"] = visible
            run(lambda: gpu.foreign_processes(uuids, own_pids=set()))
    else:
        run()
    log_path = Path(request.log_path)
    verdict = request.gates["log"]
    traces = find_traces(trace_dir)
    host = request.gates["host"]
    for trace in traces:  # analyze_trace.py compare reads these to refuse a verdict on a contended pair
        record = host_record.sidecar_document(TOOL, trace["path"], trace["sha256"], host)
        trace["host_load_path"] = str(fileio.atomic_write_text(host_record.sidecar_path(trace["path"]),
                                                               contract.dumps(record) + "\n"))
    reasons = list(request.reasons)
    if not traces:
        reasons.append(f"artifacts.no_trace: no *.trace.json[.gz] under {trace_dir}")
    status = "valid" if not reasons else "invalid"
    doc = contract.envelope("profile-run.v1", TOOL, ok=status == "valid", status=status, traces=traces,
                            log_path=str(log_path), gate=verdict, reasons=reasons, host_load=host, **base)
    text = "\n".join([f"{status}: {len(traces)} trace(s)", *(t["path"] for t in traces), *reasons,
                      host.get("reason") or "host: no other busy process at the run's start and end",
                      "next: python3 scripts/analyze_trace.py hotspots <trace> --json"])
    return _runner.Result(doc, text)


def self_tests() -> list[selftest.Check]:
    def dry_run() -> str:
        args = build_parser().parse_args(["--model", "tiny-flux-cpu", "--engine-capabilities", "recent",
                                          "--all-stages", "--dry-run", "--output-dir", "/nonexistent/prof"])
        doc = handle(args).document
        contract.check_document(doc)
        if "--profile" not in doc["argv"] or "--profile-all-stages" not in doc["argv"]:
            raise AssertionError(f"profile flags missing from {doc['argv']}")
        if not doc["profiler_env"]:
            raise AssertionError("no profiler directory variable set")
        return f"a profiled tiny-flux-cpu run builds; traces go to {sorted(doc['profiler_env'])}"

    def gate_requires_trace_line() -> str:
        markers = log_markers.markers_for_version("0.5.10.post1")
        verdict = log_gates.scan_log("Loaded transformer: X (sgl-diffusion version).\nGenerated 1 outputs in 1 s\n",
                                     markers, profiling=True)
        if verdict.valid:
            raise AssertionError("a profiled run without 'Saved profiler traces to:' passed the gate")
        return "a profiled log without the trace-saved line is invalid"

    return [*selftest.schema_checks(["profile-run.v1", "engine.v1"]), selftest.Check("dry-run", dry_run),
            selftest.Check("gate", gate_requires_trace_line)]


def main(argv=None) -> int:
    return _runner.run(TOOL, build_parser(), handle, self_tests, argv)
