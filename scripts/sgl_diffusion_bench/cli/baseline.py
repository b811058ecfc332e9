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
from typing import Any, Mapping, Sequence

from ..cell import Cell
from .. import contract, engine_baselines, engine_probe, engine_scenarios, inputs, perf_dump, selftest
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


def _argv_value(argv: Sequence[str], flag: str) -> str | None:
    for i, token in enumerate(argv):
        if token.startswith(flag + "="):
            return token[len(flag) + 1:]
        if token == flag and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _one(values: Sequence[Any]) -> Any:
    """The value all the cells share, None when they disagree or none says."""
    distinct = {v for v in values if v is not None}
    return next(iter(distinct)) if len(distinct) == 1 else None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() and len(text) < 10 else None


def report_facts(cells: Sequence[Cell], perfs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Model, size, frames, steps and GPU count of the cells' own requests; steps as the perf dumps counted them."""
    argvs = [[str(t) for t in c.argv] for c in cells]
    steps = _one([len(p["denoise_steps_ms"]) for p in perfs if p.get("denoise_steps_ms")])
    gpus = _one([_int(_argv_value(a, "--num-gpus")) or 1 for a in argvs])
    return {"model": _one([_argv_value(a, "--model-path") or _argv_value(a, "--model") for a in argvs]),
            "width": _one([_int(_argv_value(a, "--width")) for a in argvs]),
            "height": _one([_int(_argv_value(a, "--height")) for a in argvs]),
            "num_frames": _one([_int(_argv_value(a, "--num-frames")) for a in argvs]),
            "steps": steps or _one([_int(_argv_value(a, "--num-inference-steps")) for a in argvs]),
            "num_gpus": gpus}


def _gpu_names(environment: Any) -> list[str]:
    """GPU names of environment.gpus, whose entries are objects with a name or (older reports) plain names."""
    gpus = environment.get("gpus") if isinstance(environment, dict) else None
    names = [g.get("name") if isinstance(g, dict) else g for g in gpus or []]
    return [n for n in names if isinstance(n, str) and n]


def _source(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any], list[str], dict[str, Any]]:
    if args.report:
        try:
            doc = inputs.load_json(args.report, "input.unreadable")  # regular files only, strict JSON
        except contract.InputError as exc:
            raise contract.InputError("input.unreadable", f"cannot read {args.report}: {exc.message}",
                                      "pass a bench-report.v1 JSON") from None
        contract.validate_input(doc, "bench-report.v1", args.report)
        arm = args.arm or doc["campaign"].get("baseline_arm") or next(iter(doc["campaign"]["arms"]))
        cells = [c for c in map(Cell.from_json, doc["cells"]) if c.arm == arm and c.status == "valid" and c.perf]
        perfs = [c.perf for c in cells]
        return perfs, report_facts(cells, perfs), _gpu_names(doc.get("environment")), \
            {"kind": "report", "paths": [args.report], "arm": arm}
    if args.perf_dump:
        perfs, models = [], []
        for path in args.perf_dump:
            # a dump alone does not say what its memory figures are: no VRAM row unless --memory-kind does
            perfs.append(perf_dump.load_perf_dump(path, args.memory_kind).to_json())
            raw = inputs.parse_json(inputs.read_text(path, "input.perf_dump_invalid"), path, "input.perf_dump_invalid")
            models.append((raw.get("meta") or {}).get("model") if isinstance(raw.get("meta"), dict) else None)
        facts = {"model": _one(models), "width": None, "height": None, "num_frames": None,
                 "steps": _one([len(p["denoise_steps_ms"]) for p in perfs if p["denoise_steps_ms"]]), "num_gpus": None}
        return perfs, facts, [], {"kind": "perf_dumps", "paths": list(args.perf_dump), "arm": None}
    raise contract.UsageError("usage.missing_run", "give --report or --perf-dump", f"{TOOL} --help")


def _gpu(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    """The run's GPU class from its evidence; for perf dumps (which name no GPU) the one --gpu-class states."""
    name = names[0] if names else None
    if args.perf_dump:
        run_class, shown = args.gpu_class, f"{args.gpu_class} (as --gpu-class states; a perf dump names no GPU)"
    else:
        classes = {engine_baselines.gpu_class_of(n) for n in names}
        run_class = next(iter(classes)) if len(classes) == 1 else None
        shown = (f"{name} ({run_class})" if run_class else f"{name} (no engine baseline class)") if name \
            else "no GPU in the report (a CPU run)"
    return {"name": name, "run_class": run_class, "run": shown, "baseline_class": args.gpu_class or run_class}


def handle(args: argparse.Namespace) -> _runner.Result:
    perfs, run, names, source = _source(args)
    package_dir = args.engine_dir or engine_probe.probe_engine().capabilities.package_dir
    gpu = _gpu(args, names)
    base: dict[str, Any] = {"engine_dir": package_dir, "gpu_name": gpu["name"], "gpu_class": gpu["baseline_class"],
                            "baselines_path": None, "source": source, "run": run, "scenario_facts": None,
                            "mismatched": False, "mismatches": []}
    if package_dir is None:
        raise contract.PreconditionError("baseline.no_engine", "no installed engine to read baselines from",
                                         "pass --engine-dir <site-packages>/sglang")
    if gpu["baseline_class"] is None:
        result = engine_baselines.no_match(
            f"no baseline for this GPU: the engine ships baselines for {', '.join(engine_baselines.GPU_CLASSES)} "
            f"only, and the run's GPU is {gpu['name'] or 'unknown'} (--gpu-class picks a file; the GPU class is then "
            "a mismatch)")
    else:
        baselines = engine_baselines.load_baselines(package_dir, gpu["baseline_class"])
        base["baselines_path"] = baselines["path"]
        result = _judge(args, perfs, run, gpu, baselines, package_dir, base)
    ok = result["verdict"] == "within_baseline"
    doc = contract.envelope("baseline-check.v1", TOOL, ok=ok, **base, result=result)
    exit_code = 0 if ok else (1 if result["verdict"] == "over_baseline" else int(contract.ExitCode.PRECONDITION))
    return _runner.Result(doc, render(doc), exit_code=exit_code)


def _judge(args: argparse.Namespace, perfs: list[dict[str, Any]], run: dict[str, Any], gpu: dict[str, Any],
           baselines: dict[str, Any], package_dir: str, base: dict[str, Any]) -> dict[str, Any]:
    """Pick or check the scenario, refuse a mismatch unless allowed, compare."""
    scenarios = sorted(baselines["scenarios"])
    cases = engine_scenarios.read_scenarios(package_dir)
    facts = {sid: engine_baselines.scenario_facts(cases.get(sid), baselines["scenarios"][sid]) for sid in scenarios}
    where = f"{gpu['baseline_class']}.json"
    if args.scenario and args.scenario not in baselines["scenarios"]:
        return engine_baselines.no_match(f"scenario {args.scenario!r} is not in {where}: no comparison", scenarios)
    scenario = args.scenario
    if not scenario:
        picked = engine_baselines.matching_scenarios(run, facts)
        if len(picked) != 1:
            what = f"{len(picked)} scenarios of {where} match the run ({', '.join(picked)})" if picked else \
                f"no scenario of {where} measured what the run measured"
            return engine_baselines.no_match(
                f"{what} ({engine_baselines.describe(run)}): pass --scenario", scenarios)
        scenario = picked[0]
    base["scenario_facts"] = facts[scenario]
    found = engine_baselines.mismatches(run, facts[scenario], gpu)
    base["mismatches"], base["mismatched"] = found, bool(found)
    if engine_baselines.not_allowed(found, args.allow_mismatch):
        return engine_baselines.refused(scenario, found, scenarios)
    if not perfs:
        raise contract.InputError("baseline.no_valid_runs", "the run has no valid cell with a perf dump",
                                  "compare a run whose cells are valid")
    result = engine_baselines.compare(perfs, baselines, scenario, profile=args.profile,
                                      constants=engine_baselines.checker_constants(package_dir))
    if found:
        result["figures_verdict"], result["verdict"] = result["verdict"], "mismatched"
    return result


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
