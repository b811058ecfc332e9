"""compare_engine_baseline: a run against the perf baselines the installed engine ships for its nightly CI, with
the engine's own tolerances. The baseline file is read from the installed engine at run time. When the run's GPU
class or the scenario has no baseline, the document says so plainly (exit 3); over a limit exits 1."""

from __future__ import annotations

import argparse
from typing import Any

from .. import contract, engine_baselines, engine_probe, inputs, perf_dump, selftest
from . import _runner

TOOL = "compare_engine_baseline"
EPILOG = """examples:
  python3 scripts/compare_engine_baseline.py --report <run>.bench-report.json --arm eager \\
      --scenario flux_image_t2i --json
  python3 scripts/compare_engine_baseline.py --perf-dump a.json b.json --gpu-class h100 --scenario qwen_image_t2i --json

""" + _runner.EXIT_CODES_EPILOG


def build_parser() -> _runner.Parser:
    parser = _runner.new_parser(TOOL, __doc__.strip(), EPILOG)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--report", help="a bench-report.v1 JSON: its valid cells of --arm are the run")
    source.add_argument("--perf-dump", nargs="+", default=[], help="perf dumps of the run (their mean is compared)")
    parser.add_argument("--arm", help="which arm of --report (default: the baseline arm)")
    parser.add_argument("--scenario", required=False, help="the engine CI scenario id, e.g. flux_image_t2i")
    parser.add_argument("--gpu-class", choices=sorted(engine_baselines.GPU_CLASSES),
                        help="default: from the report's GPU name (H100, B200, 5090, B60)")
    parser.add_argument("--profile", choices=engine_baselines.PROFILES, default="pr_test",
                        help="the engine's tolerance profile (default pr_test)")
    parser.add_argument("--engine-dir", help="the sglang package directory (default: the installed engine's)")
    return parser


def _source(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str | None, dict[str, Any]]:
    if args.report:
        try:
            doc = inputs.load_json(args.report, "input.unreadable")  # regular files only, strict JSON
        except contract.InputError as exc:
            raise contract.InputError("input.unreadable", f"cannot read {args.report}: {exc.message}",
                                      "pass a bench-report.v1 JSON") from None
        contract.validate_input(doc, "bench-report.v1", args.report)
        arm = args.arm or doc["campaign"].get("baseline_arm") or next(iter(doc["campaign"]["arms"]))
        perfs = [c["perf"] for c in doc["cells"] if c["arm"] == arm and c["status"] == "valid" and c.get("perf")]
        names = [g.get("name") for g in (doc.get("environment") or {}).get("gpus") or []]
        return perfs, next((n for n in names if n), None), {"kind": "report", "paths": [args.report], "arm": arm}
    if args.perf_dump:
        perfs = [perf_dump.load_perf_dump(p, "device").to_json() for p in args.perf_dump]
        return perfs, None, {"kind": "perf_dumps", "paths": list(args.perf_dump), "arm": None}
    raise contract.UsageError("usage.missing_run", "give --report or --perf-dump", f"{TOOL} --help")


def handle(args: argparse.Namespace) -> _runner.Result:
    perfs, gpu_name, source = _source(args)
    package_dir = args.engine_dir or engine_probe.probe_engine().capabilities.package_dir
    gpu_class = args.gpu_class or engine_baselines.gpu_class_of(gpu_name)
    base: dict[str, Any] = {"engine_dir": package_dir, "gpu_name": gpu_name, "gpu_class": gpu_class,
                            "baselines_path": None, "source": source}
    if package_dir is None:
        raise contract.PreconditionError("baseline.no_engine", "no installed engine to read baselines from",
                                         "pass --engine-dir <site-packages>/sglang")
    if gpu_class is None:
        result = engine_baselines.no_match(
            f"no baseline for this GPU: the engine ships baselines for {', '.join(engine_baselines.GPU_CLASSES)} "
            f"only, and the run's GPU is {gpu_name or 'unknown'} (pass --gpu-class to compare anyway)")
    else:
        baselines = engine_baselines.load_baselines(package_dir, gpu_class)
        base["baselines_path"] = baselines["path"]
        scenarios = sorted(baselines["scenarios"])
        if not args.scenario or args.scenario not in baselines["scenarios"]:
            result = engine_baselines.no_match(
                (f"scenario {args.scenario!r} is not in {gpu_class}.json" if args.scenario else "no --scenario given")
                + ": no comparison; pick the CI scenario whose model, shape and flags match the run", scenarios)
        elif not perfs:
            raise contract.InputError("baseline.no_valid_runs", "the run has no valid cell with a perf dump",
                                      "compare a run whose cells are valid")
        else:
            result = engine_baselines.compare(perfs, baselines, args.scenario, profile=args.profile,
                                              constants=engine_baselines.checker_constants(package_dir))
    doc = contract.envelope("baseline-check.v1", TOOL, ok=result["verdict"] == "within_baseline", **base,
                            result=result)
    exit_code = 0 if doc["ok"] else (1 if result["verdict"] == "over_baseline" else int(contract.ExitCode.PRECONDITION))
    return _runner.Result(doc, render(doc), exit_code=exit_code)


def render(doc: dict[str, Any]) -> str:
    result = doc["result"]
    if not result["matched"]:
        return f"NO MATCH: {result['reason']}"
    lines = [f"{result['scenario']} on {doc['gpu_class']} ({result['profile']} tolerances): {result['verdict']}"]
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

    return [*selftest.schema_checks(["baseline-check.v1"]), selftest.Check("bound", bound)]


def main(argv=None) -> int:
    return _runner.run(TOOL, build_parser(), handle, self_tests, argv)
