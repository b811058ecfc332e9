"""compare_engine_baseline: a run against the perf baselines the installed engine ships for its nightly CI, with
the engine's own tolerances, read from the installed engine at run time. A baseline is compared only with a run that
measured the same thing: the model (by the name the engine resolves it by), output size (frames for video), denoise
steps, GPU count and GPU class must match, read from the run's own evidence (a bench report's cell argv, perf dumps and
environment.gpus; a perf dump's own model and steps, the GPU class then only from --gpu-class). Otherwise it refuses
(exit 3) naming each mismatch. An H200 (or any GPU without an engine class) never matches h100: --allow-mismatch
gpu_class compares anyway, marked mismatched: true (ok false, exit 3, never a pass). Without --scenario the one
scenario matching the run is picked. Over a limit exits 1."""

from __future__ import annotations

import argparse
from typing import Any

from .. import selftest
from ..judging import baseline_check, engine_baselines, perf_dump
from . import _runner

TOOL = "compare_engine_baseline"
EPILOG = """examples:
  python3 scripts/compare_engine_baseline.py --report <run>.bench-report.json --arm eager --json
  python3 scripts/compare_engine_baseline.py --report <run>.bench-report.json --gpu-class h100 \\
      --scenario flux_image_t2i --allow-mismatch gpu_class --json
  python3 scripts/compare_engine_baseline.py --perf-dump a.json b.json --gpu-class h100 --scenario qwen_image_t2i \\
      --allow-mismatch size num_gpus --json

a perf dump does not say its output size or GPU count: those stay unconfirmed, so a dump-only comparison is always
marked mismatched. An H200 run has no baseline class: against h100 it is mismatched on gpu_class.

""" + _runner.EXIT_CODES_EPILOG


def build_parser() -> _runner.Parser:
    parser = _runner.new_parser(TOOL, __doc__.strip(), EPILOG)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--report", help="a bench-report.v1 JSON: its valid cells of --arm are the run")
    source.add_argument("--perf-dump", nargs="+", default=[], help="perf dumps of the run (their mean is compared)")
    parser.add_argument("--memory-kind", choices=perf_dump.MEMORY_KINDS,
                        help="with --perf-dump: what the dumps' memory figures are (device on a GPU); a dump does "
                             "not say, so without it peak VRAM is not compared")
    parser.add_argument("--arm", help="which arm of --report (default: the baseline arm)")
    parser.add_argument("--scenario", required=False,
                        help="the engine CI scenario id, e.g. flux_image_t2i (default: the one that matches the run)")
    parser.add_argument("--gpu-class", choices=sorted(engine_baselines.GPU_CLASSES),
                        help="which baseline file (default: the class of the report's GPU: H100, B200, 5090, B60); "
                             "a report whose GPU is of another class is then mismatched on gpu_class")
    parser.add_argument("--profile", choices=engine_baselines.PROFILES, default="pr_test",
                        help="the engine's tolerance profile (default pr_test)")
    parser.add_argument("--allow-mismatch", nargs="*", choices=engine_baselines.MATCH_FIELDS, metavar="FIELD",
                        help="compare although these fields differ (bare: any field; "
                             f"{', '.join(engine_baselines.MATCH_FIELDS)}); the document says mismatched: true, "
                             "ok false, exit 3")
    parser.add_argument("--engine-dir", help="the sglang package directory (default: the installed engine's)")
    return parser


def handle(args: argparse.Namespace) -> _runner.Result:
    doc = baseline_check.check(report=args.report, perf_dumps=args.perf_dump, memory_kind=args.memory_kind,
                               arm=args.arm, scenario=args.scenario, gpu_class=args.gpu_class, profile=args.profile,
                               allow_mismatch=args.allow_mismatch, engine_dir=args.engine_dir, tool=TOOL)
    return _runner.Result(doc, render(doc), exit_code=baseline_check.exit_code(doc))


def _mismatch_lines(doc: dict[str, Any]) -> list[str]:
    return [f"  {m['field']}: run {m['run'] if m['run'] is not None else 'unknown'}, scenario "
            f"{m['scenario'] if m['scenario'] is not None else 'unknown'}" for m in doc["mismatches"]]


def render(doc: dict[str, Any]) -> str:
    result = doc["result"]
    if result["verdict"] == "mismatch_refused":
        return "\n".join([f"REFUSED (mismatch): {result['reason']}", *_mismatch_lines(doc)])
    if not result["matched"]:
        return f"NO MATCH: {result['reason']}"
    lines = [f"{result['scenario']} on {doc['gpu_class']} ({result['profile']} tolerances): {result['verdict']}"]
    if doc["mismatched"]:
        lines = [f"MISMATCHED: not evidence, not a pass: the run did not measure what {result['scenario']} measured "
                 f"(figures alone say {result['figures_verdict']})", *_mismatch_lines(doc)]
    for r in result["rows"]:
        if r["status"] == "not_compared":
            continue
        lines.append(f"  [{r['status']}] {r['metric']}: {r['actual']:.2f} vs expected {r['expected']:.2f} "
                     f"(limit {r['limit']:.2f}, {r['change_pct']:+.1f}%)")
    return "\n".join(lines)


def self_tests() -> list[selftest.Check]:
    def bound() -> str:
        bounds = engine_baselines.upper_bound(100.0, 0.25, 20.0), engine_baselines.upper_bound(10.0, 0.25, 20.0)
        if bounds != (125.0, 30.0):
            raise AssertionError("upper bound differs from the engine's calculate_upper_bound")
        return "the engine's bound: max(expected * (1 + tol), expected + min_abs)"

    return [*selftest.schema_checks(["baseline-check.v1", engine_baselines.SCHEMA_ID]), selftest.Check("bound", bound)]


def main(argv=None) -> int:
    return _runner.run(TOOL, build_parser(), handle, self_tests, argv)
