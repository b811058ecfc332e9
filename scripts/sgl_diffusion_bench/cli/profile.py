"""profile_diffusion: run a preset under the engine's own torch.profiler and return the trace files per rank.

The profiler changes latency a lot, so a profiled run never yields benchmark numbers: this tool reports traces,
not timings (take those from bench_diffusion_denoise.py on an unprofiled run). Feed the traces to
analyze_trace.py (hotspots, compare, classify).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from .. import contract, presets, selftest, work_dirs
from ..campaign import profile_run
from ..judging import log_gates, log_markers
from . import _engine_args, _runner
from .bench import engine_capabilities

TOOL = "profile_diffusion"
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


def request_of(args: argparse.Namespace) -> profile_run.ProfileRequest:
    try:
        extra = shlex.split(args.extra_args)
    except ValueError as exc:
        raise contract.UsageError("usage.bad_extra_args", f"--extra-args does not parse: {exc}", "quote it") from exc
    output_root = Path(args.output_dir).resolve() if args.output_dir else work_dirs.output_dir("profiles")
    return profile_run.ProfileRequest(
        label=args.label, output_root=output_root,
        model_path=args.model_path, num_profiled_timesteps=args.num_profiled_timesteps, all_stages=args.all_stages,
        quality=args.quality, breakable_cuda_graph=args.breakable_cuda_graph, warmup=not args.no_warmup,
        extra_args=tuple(extra), timeout_s=args.timeout_s, echo=args.echo_engine)


def handle(args: argparse.Namespace) -> _runner.Result:
    preset = presets.customised([presets.get_preset(args.model)], args.override, args.model_path)[0]
    caps = engine_capabilities(args)
    request = request_of(args)
    if args.dry_run:
        invocation, trace_dir, profiler_env = profile_run.profile_invocation(preset, caps, request, build_model=False)
        doc = contract.envelope("profile-run.v1", TOOL, status="planned", traces=[], log_path=None, gate=None,
                                reasons=[], host_load=None,
                                **profile_run.describe(preset, request, invocation, trace_dir, profiler_env))
        return _runner.Result(doc, " \\\n  ".join(map(shlex.quote, invocation.argv)))
    payload = profile_run.run_profile(preset, caps, request)
    doc = contract.envelope("profile-run.v1", TOOL, ok=payload["status"] == "valid", **payload)
    traces = payload["traces"]
    text = "\n".join([f"{payload['status']}: {len(traces)} trace(s)", *(t["path"] for t in traces), *payload["reasons"],
                       payload["host_load"].get("reason") or "host: no other busy process at the run's start and end",
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
