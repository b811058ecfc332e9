"""A run against the installed engine's nightly perf baselines (baseline-check.v1), from a bench report or perf
dumps: the run's facts read from its own evidence, its GPU class from its own GPU (or as stated), the one scenario
that measured what it measured picked (or the one named), a mismatch refused unless allowed, the figures judged with
the engine's tolerances (``engine_baselines``). ``compare_engine_baseline`` renders ``check``; ``sweep merge`` calls
``for_report`` per shard."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .. import contract, inputs
from ..engine import engine_probe, engine_scenarios
from . import engine_baselines, perf_dump
from .cell import Cell

# A sweep shard's comparison: the engine's verdicts, and why there was none.
SWEEP_STATUS = {"within_baseline": "pass", "over_baseline": "fail", "mismatch_refused": "mismatch_refused"}


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


def gpu_names(environment: Any) -> list[str]:
    """GPU names of environment.gpus, whose entries are objects with a name or (older reports) plain names."""
    gpus = environment.get("gpus") if isinstance(environment, dict) else None
    names = [g.get("name") if isinstance(g, dict) else g for g in gpus or []]
    return [n for n in names if isinstance(n, str) and n]


def report_run(doc: Mapping[str, Any], arm: str | None, path: str) -> tuple[list, dict, list[str], dict]:
    """Perfs, facts, GPU names and source of the valid cells of ``arm`` (default: the baseline arm) of a validated
    bench-report.v1 document."""
    arm = arm or doc["campaign"].get("baseline_arm") or next(iter(doc["campaign"]["arms"]))
    cells = [c for c in map(Cell.from_json, doc["cells"]) if c.arm == arm and c.status == "valid" and c.perf]
    perfs = [c.perf for c in cells]
    return perfs, report_facts(cells, perfs), gpu_names(doc.get("environment")), \
        {"kind": "report", "paths": [path], "arm": arm}


def _source(report: str | None, dumps: Sequence[str], arm: str | None, memory_kind: str | None, tool: str
            ) -> tuple[list[dict[str, Any]], dict[str, Any], list[str], dict[str, Any]]:
    if report:
        try:
            doc = inputs.load_json(report, "input.unreadable")  # regular files only, strict JSON
        except contract.InputError as exc:
            raise contract.InputError("input.unreadable", f"cannot read {report}: {exc.message}",
                                      "pass a bench-report.v1 JSON") from None
        contract.validate_input(doc, "bench-report.v1", report)
        return report_run(doc, arm, report)
    if dumps:
        perfs, models = [], []
        for path in dumps:
            # a dump alone does not say what its memory figures are: no VRAM row unless --memory-kind does
            perfs.append(perf_dump.load_perf_dump(path, memory_kind).to_json())
            raw = inputs.parse_json(inputs.read_text(path, "input.perf_dump_invalid"), path, "input.perf_dump_invalid")
            models.append((raw.get("meta") or {}).get("model") if isinstance(raw.get("meta"), dict) else None)
        facts = {"model": _one(models), "width": None, "height": None, "num_frames": None,
                 "steps": _one([len(p["denoise_steps_ms"]) for p in perfs if p["denoise_steps_ms"]]), "num_gpus": None}
        return perfs, facts, [], {"kind": "perf_dumps", "paths": list(dumps), "arm": None}
    raise contract.UsageError("usage.missing_run", "give --report or --perf-dump", f"{tool} --help")


def _gpu(names: list[str], gpu_class: str | None, dump_only: bool) -> dict[str, Any]:
    """The run's GPU class from its evidence; for perf dumps (which name no GPU) the one ``gpu_class`` states."""
    name = names[0] if names else None
    if dump_only:
        run_class, shown = gpu_class, f"{gpu_class} (as --gpu-class states; a perf dump names no GPU)"
    else:
        classes = {engine_baselines.gpu_class_of(n) for n in names}
        run_class = next(iter(classes)) if len(classes) == 1 else None
        shown = (f"{name} ({run_class})" if run_class else f"{name} (no engine baseline class)") if name \
            else "no GPU in the report (a CPU run)"
    return {"name": name, "run_class": run_class, "run": shown, "baseline_class": gpu_class or run_class}


def judge(perfs: list[dict[str, Any]], run: dict[str, Any], names: list[str], source: dict[str, Any],
          package_dir: str, *, gpu_class: str | None = None, scenario: str | None = None, profile: str = "pr_test",
          allow_mismatch: Sequence[str] | None = None) -> dict[str, Any]:
    """The baseline-check.v1 fields (without the envelope) of one run against the engine in ``package_dir``."""
    gpu = _gpu(names, gpu_class, source["kind"] == "perf_dumps")
    base: dict[str, Any] = {"engine_dir": package_dir, "gpu_name": gpu["name"], "gpu_class": gpu["baseline_class"],
                            "baselines_path": None, "source": source, "run": run, "scenario_facts": None,
                            "mismatched": False, "mismatches": []}
    if gpu["baseline_class"] is None:
        base["result"] = engine_baselines.no_match(
            f"no baseline for this GPU: the engine ships baselines for {', '.join(engine_baselines.GPU_CLASSES)} "
            f"only, and the run's GPU is {gpu['name'] or 'unknown'} (--gpu-class picks a file; the GPU class is then "
            "a mismatch)")
        return base
    baselines = engine_baselines.load_baselines(package_dir, gpu["baseline_class"])
    base["baselines_path"] = baselines["path"]
    base["result"] = _judge(perfs, run, gpu, baselines, package_dir, base, scenario, profile, allow_mismatch)
    return base


def check(*, report: str | None, perf_dumps: Sequence[str], memory_kind: str | None, arm: str | None,
          scenario: str | None, gpu_class: str | None, profile: str, allow_mismatch: Sequence[str] | None,
          engine_dir: str | None, tool: str) -> dict[str, Any]:
    """compare_engine_baseline: the baseline-check.v1 document of a report or of perf dumps."""
    perfs, run, names, source = _source(report, perf_dumps, arm, memory_kind, tool)
    package_dir = engine_dir or engine_probe.probe_engine().capabilities.package_dir
    if package_dir is None:
        raise contract.PreconditionError("baseline.no_engine", "no installed engine to read baselines from",
                                         "pass --engine-dir <site-packages>/sglang")
    fields = judge(perfs, run, names, source, package_dir, gpu_class=gpu_class, scenario=scenario, profile=profile,
                   allow_mismatch=allow_mismatch)
    ok = fields["result"]["verdict"] == "within_baseline"
    return contract.envelope("baseline-check.v1", tool, ok=ok, **fields)


def exit_code(doc: Mapping[str, Any]) -> int:
    """0 within the baseline, 1 over it, 3 (precondition) for no comparison or a mismatch."""
    verdict = doc["result"]["verdict"]
    return 0 if verdict == "within_baseline" else (1 if verdict == "over_baseline"
                                                   else int(contract.ExitCode.PRECONDITION))


def _judge(perfs: list[dict[str, Any]], run: dict[str, Any], gpu: dict[str, Any], baselines: dict[str, Any],
           package_dir: str, base: dict[str, Any], scenario: str | None, profile: str,
           allow_mismatch: Sequence[str] | None) -> dict[str, Any]:
    """Pick or check the scenario, refuse a mismatch unless allowed, compare."""
    scenarios = sorted(baselines["scenarios"])
    cases = engine_scenarios.read_scenarios(package_dir)
    facts = {sid: engine_baselines.scenario_facts(cases.get(sid), baselines["scenarios"][sid]) for sid in scenarios}
    where = f"{gpu['baseline_class']}.json"
    if scenario and scenario not in baselines["scenarios"]:
        return engine_baselines.no_match(f"scenario {scenario!r} is not in {where}: no comparison", scenarios)
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
    if engine_baselines.not_allowed(found, allow_mismatch):
        return engine_baselines.refused(scenario, found, scenarios)
    if not perfs:
        raise contract.InputError("baseline.no_valid_runs", "the run has no valid cell with a perf dump",
                                  "compare a run whose cells are valid")
    result = engine_baselines.compare(perfs, baselines, scenario, profile=profile,
                                      constants=engine_baselines.checker_constants(package_dir))
    if found:
        result["figures_verdict"], result["verdict"] = result["verdict"], "mismatched"
    return result


def _no_baseline(reason: str, **known: Any) -> dict[str, Any]:
    return {"status": "no_baseline", "reason": reason, "gpu_name": None, "gpu_class": None, "scenario": None,
            "profile": None, "baseline_e2e_ms": None, "e2e_ms": None, "change_pct": None, "limit_ms": None,
            "over": [], "mismatches": [], **known}


def for_report(doc: Mapping[str, Any], arm: str, path: str, package_dir: str | None) -> dict[str, Any]:
    """One arm of a sweep shard's bench report against the nightly baseline of its scenario and GPU class, picked
    from the report's own evidence exactly as compare_engine_baseline does without --scenario and --gpu-class:
    pass / fail by the engine's tolerance, mismatch_refused or no_baseline with the reason, never a comparison of
    runs that measured different things."""
    if package_dir is None:
        return _no_baseline("no installed engine to read perf baselines from (merge --engine-dir names one)")
    if contract.validation_errors(doc, "bench-report.v1"):
        return _no_baseline("the shard's report is not a valid bench-report.v1: nothing to compare")
    perfs, run, names, source = report_run(doc, arm, path)
    if not names:
        return _no_baseline("a CPU run: the engine ships perf baselines for GPU classes "
                            f"({', '.join(engine_baselines.GPU_CLASSES)}) only")
    if not perfs:
        return _no_baseline(f"arm {arm} has no valid cell with a perf dump", gpu_name=names[0])
    try:
        fields = judge(perfs, run, names, source, package_dir)
    except contract.ToolError as exc:  # the engine ships no baselines, or a malformed file: no comparison
        return _no_baseline(f"{exc.code}: {exc.message}", gpu_name=names[0])
    result = fields["result"]
    known = {"gpu_name": fields["gpu_name"], "gpu_class": fields["gpu_class"], "scenario": result.get("scenario"),
             "mismatches": fields["mismatches"]}
    if result["verdict"] not in SWEEP_STATUS:
        return _no_baseline(result.get("reason") or "the scenario has no figure the run measured", **known)
    e2e = next((r for r in result.get("rows", []) if r["metric"] == "e2e_ms"), {})
    return {**_no_baseline(result.get("reason"), **known), "status": SWEEP_STATUS[result["verdict"]],
            "profile": result.get("profile"), "baseline_e2e_ms": e2e.get("expected"), "e2e_ms": e2e.get("actual"),
            "change_pct": e2e.get("change_pct"), "limit_ms": e2e.get("limit"), "over": result.get("over", [])}
