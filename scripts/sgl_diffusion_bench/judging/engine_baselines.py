"""Compare a run with the performance baselines the installed engine ships for its nightly CI
(``sglang/multimodal_gen/test/server/perf_baselines/{h100,b200,5090,xpu_b60}.json``), read at run time from the
engine, never copied: per scenario expected e2e, stage times, denoise steps and VRAM, judged with the engine's own
tolerances (``pr_test`` or ``long_term``) and its own bound, max(expected * (1 + tol), expected + min_abs).

A baseline is evidence only for what its scenario measured. A run is compared with a scenario only when the run's
own evidence and the scenario agree on the model (the name the engine resolves it by: the last part of its path or
repo id, so a random or tiny stand-in under another name does not match), the output size (and frames for video), the
denoise steps, the GPU count and the GPU class. The scenario's steps are counted in its baseline (``denoise_step_ms``),
its model, size, frames and GPUs read from the engine's case definitions (``engine_scenarios``). A figure either side
cannot show counts as a mismatch, never as a match.

The GPU class is the class of the run's own GPU (H100, B200, 5090, B60); any other GPU, an H200 among them, has none:
the engine's nightly would pick h100.json on any Hopper, but an H200's bandwidth and clocks are not an H100's, so its
figures against H100 numbers are a different measurement. Such a comparison is made only on request
(``--allow-mismatch gpu_class``) and the document then says ``mismatched: true``: never a pass.

The baseline file itself is checked against ``schemas/engine-baselines.v1``: a malformed file is refused
(``baseline.malformed``), never compared.
"""

from __future__ import annotations

import ast
import math
import os
import statistics
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Mapping, Sequence

from .. import contract, inputs

BASELINE_DIR = Path("multimodal_gen/test/server/perf_baselines")
CHECKER_SOURCE = Path("multimodal_gen/test/server/test_server_utils.py")
GPU_CLASSES = {"h100": "h100.json", "b200": "b200.json", "5090": "5090.json", "xpu_b60": "xpu_b60.json"}
# How a GPU's name maps to the class whose CI pool recorded the numbers (the engine's own aliases, by name).
NAME_HINTS = (("H100", "h100"), ("B200", "b200"), ("5090", "5090"), ("B60", "xpu_b60"))
PROFILES = ("pr_test", "long_term")
SCHEMA_ID = "engine-baselines.v1"
# What a run and a scenario must share (--allow-mismatch names these).
MATCH_FIELDS = ("model", "size", "frames", "steps", "num_gpus", "gpu_class")
# The engine's ToleranceConfig default when a profile does not name it.
DEFAULT_RUNTIME_PEAK_VRAM_TOL = 0.02
# The checker's defaults (test_server_utils.py) when its source cannot be read: timing pad 20 ms, memory 128 MiB.
DEFAULT_MIN_ABS = {"timing": 20.0, "stage": 120.0, "memory": 128.0}


def gpu_class_of(gpu_name: str | None) -> str | None:
    for hint, cls in NAME_HINTS:
        if gpu_name and hint.lower() in gpu_name.lower():
            return cls
    return None


def load_baselines(package_dir: str | Path, gpu_class: str) -> dict[str, Any]:
    """The engine's baseline file for ``gpu_class``, refused unless it has the shape of engine-baselines.v1."""
    path = Path(package_dir) / BASELINE_DIR / GPU_CLASSES[gpu_class]
    if not os.path.lexists(path):
        raise contract.PreconditionError("baseline.not_shipped", f"the installed engine has no {path}",
                                         "use sglang 0.5.23 or newer, whose wheel ships its CI perf baselines")
    try:
        text = inputs.read_text(path, "input.unreadable")  # regular files only: a FIFO never blocks the read
    except contract.InputError as exc:
        raise contract.InputError("baseline.unreadable", exc.message, "reinstall the engine, or pass "
                                  "--engine-dir with an intact perf_baselines/") from None
    document = inputs.parse_json(text, str(path), "baseline.malformed")
    problems = contract.validation_errors(document, SCHEMA_ID)
    if problems:
        raise contract.InputError("baseline.malformed", f"{path} does not have the shape of the engine's baseline "
                                  f"file ({SCHEMA_ID}): " + "; ".join(problems[:5]),
                                  "reinstall the engine, or pass --engine-dir with an intact perf_baselines/")
    return {"path": str(path), **document}


def checker_constants(package_dir: str | Path) -> dict[str, float]:
    """The engine checker's module constants (first-step and decoding allowances), read from its source."""
    found: dict[str, float] = {}
    try:
        tree = ast.parse(inputs.read_text(Path(package_dir) / CHECKER_SOURCE, "input.unreadable"))
    except (contract.InputError, SyntaxError, ValueError):
        return found
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, (int, float)):
            found[node.targets[0].id] = float(node.value.value)
    return found


def upper_bound(expected: float, tol: float, min_abs: float) -> float:
    """sglang.multimodal_gen.benchmarks.compare_perf.calculate_upper_bound."""
    return max(expected * (1 + tol), expected + min_abs)


def _row(metric: str, actual: float | None, expected: float | None, tol: float, min_abs: float) -> dict[str, Any]:
    if actual is None or expected is None or expected <= 0:
        return {"metric": metric, "actual": actual, "expected": expected, "tolerance": tol, "min_abs": min_abs,
                "limit": None, "change_pct": None, "status": "not_compared"}
    limit = upper_bound(expected, tol, min_abs)
    change_pct = (actual - expected) / expected * 100
    if not (math.isfinite(limit) and math.isfinite(change_pct)):
        raise contract.InputError("input.out_of_range", f"{metric}: {actual!r} against {expected!r} overflows",
                                  "compare figures the engine measured (milliseconds, MiB)")
    return {"metric": metric, "actual": actual, "expected": expected, "tolerance": tol, "min_abs": min_abs,
            "limit": limit, "change_pct": change_pct,
            "status": "within" if actual <= limit else "over"}


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def measured(perfs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Means over the runs' perf (bench-report.v1 perf objects): e2e, each stage, step mean/median, peak memory."""
    stages = list(dict.fromkeys(n for p in perfs for n in p.get("stage_order", p["stages"])))
    steps = [s for p in perfs for s in p.get("denoise_steps_ms", [])]
    return {"runs": len(perfs), "e2e_ms": _mean([p["e2e_ms"] for p in perfs]),
            "stages": {n: _mean([p["stages"].get(n) for p in perfs]) for n in stages},
            "denoise_stage_names": sorted({n for p in perfs for n in p.get("denoise_stage_names", [])}),
            "step_mean_ms": statistics.fmean(steps) if steps else None,
            "step_median_ms": statistics.median(steps) if steps else None,
            "peak_memory_mb": max((p["peak_memory_mb"] for p in perfs if p.get("peak_memory_mb") is not None),
                                  default=None),
            "memory_kind": next((p.get("memory_kind") for p in perfs), None)}


def compare(perfs: Sequence[Mapping[str, Any]], baselines: Mapping[str, Any], scenario: str, *,
            profile: str = "pr_test", constants: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Every figure the scenario has against the run's, with the engine's tolerance profile."""
    consts = constants or {}
    tolerances = baselines["tolerances"].get(profile) or baselines["tolerances"]["pr_test"]
    expected = baselines["scenarios"][scenario]
    got = measured(perfs)
    timing_tol = lambda t: max(t, expected.get("timing_tolerance") or 0.0)  # noqa: E731 (the case's override)
    rows = [_row("e2e_ms", got["e2e_ms"], expected.get("expected_e2e_ms"), timing_tol(tolerances["e2e"]),
                 DEFAULT_MIN_ABS["timing"])]
    for name, ms in expected.get("stages_ms", {}).items():
        tol = tolerances["denoise_stage"] if name in got["denoise_stage_names"] else tolerances["non_denoise_stage"]
        pad = DEFAULT_MIN_ABS["stage"]
        if name.endswith("DecodingStage"):
            tol, pad = max(tol, 0.9), consts.get("DECODING_STAGE_MIN_ABS_TOLERANCE_MS", pad)
        rows.append(_row(f"stage:{name}", got["stages"].get(name), ms, timing_tol(tol), pad))
    for key, metric in (("expected_avg_denoise_ms", "step_mean_ms"), ("expected_median_denoise_ms", "step_median_ms")):
        rows.append(_row(metric, got[metric], expected.get(key), timing_tol(tolerances["denoise_agg"]),
                         DEFAULT_MIN_ABS["timing"]))
    if got["memory_kind"] == "device":
        rows.append(_row("runtime_peak_vram_mb", got["peak_memory_mb"], expected.get("runtime_peak_vram_mb"),
                         tolerances.get("runtime_peak_vram", DEFAULT_RUNTIME_PEAK_VRAM_TOL),
                         DEFAULT_MIN_ABS["memory"]))
    compared = [r for r in rows if r["status"] != "not_compared"]
    over = [r["metric"] for r in compared if r["status"] == "over"]
    verdict = "no_figures" if not compared else ("over_baseline" if over else "within_baseline")
    return {"matched": True, "scenario": scenario, "profile": profile, "tolerances": tolerances,
            "measured": got, "rows": rows, "over": over, "verdict": verdict}


def no_match(reason: str, available: Sequence[str] = ()) -> dict[str, Any]:
    return {"matched": False, "reason": reason, "available_scenarios": list(available), "verdict": "no_match"}


def refused(scenario: str, mismatches: Sequence[Mapping[str, Any]], available: Sequence[str]) -> dict[str, Any]:
    fields = ", ".join(m["field"] for m in mismatches)
    return {"matched": False, "verdict": "mismatch_refused", "scenario": scenario, "available_scenarios":
            list(available), "reason": f"the run and scenario {scenario} differ in {fields}: its baseline is not "
            "evidence for this run (pick the scenario that measured what the run measured, or --allow-mismatch "
            "FIELD for a comparison marked mismatched)"}


def model_name(path: Any) -> str | None:
    """The name the engine resolves a model by: the last part of its local path or repo id."""
    return PurePosixPath(path.rstrip("/")).name or None if isinstance(path, str) and path.strip("/") else None


def scenario_facts(case: Mapping[str, Any] | None, expected: Mapping[str, Any]) -> dict[str, Any]:
    """What the scenario measured: steps counted in its baseline, the rest from its case definition."""
    case = case or {}
    steps = len(expected.get("denoise_step_ms") or {}) or case.get("steps")
    return {"model": case.get("model"), "width": case.get("width"), "height": case.get("height"),
            "num_frames": case.get("num_frames"), "steps": steps, "num_gpus": case.get("num_gpus")}


def _size(facts: Mapping[str, Any]) -> str | None:
    return f"{facts['width']}x{facts['height']}" if facts.get("width") and facts.get("height") else None


def mismatches(run: Mapping[str, Any], scenario: Mapping[str, Any], gpu: Mapping[str, Any] | None = None
               ) -> list[dict[str, Any]]:
    """Each field the run and the scenario do not share, with both values; None on either side is a mismatch."""
    run_model, scenario_model = model_name(run.get("model")), model_name(scenario.get("model"))
    pairs: list[tuple[str, Any, Any]] = [("model", run_model, scenario_model), ("size", _size(run), _size(scenario))]
    if run.get("num_frames") is not None or scenario.get("num_frames") is not None:
        pairs.append(("frames", run.get("num_frames"), scenario.get("num_frames")))
    pairs += [("steps", run.get("steps"), scenario.get("steps")), ("num_gpus", run.get("num_gpus"),
                                                                   scenario.get("num_gpus"))]
    found = [{"field": field, "run": a, "scenario": b} for field, a, b in pairs
             if a is None or b is None or (a.casefold() != b.casefold() if field == "model" else a != b)]
    if gpu is not None and gpu["run_class"] != gpu["baseline_class"]:
        found.append({"field": "gpu_class", "run": gpu["run"], "scenario": gpu["baseline_class"]})
    return found


def describe(facts: Mapping[str, Any]) -> str:
    """One line of what a run measured, "unknown" where its evidence does not say."""
    frames = f", {facts['num_frames']} frames" if facts.get("num_frames") is not None else ""
    return (f"model {model_name(facts.get('model')) or 'unknown'}, size {_size(facts) or 'unknown'}{frames}, "
            f"{facts.get('steps') or 'unknown'} steps, {facts.get('num_gpus') or 'unknown'} GPU(s)")


def matching_scenarios(run: Mapping[str, Any], facts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The scenarios whose model, size, frames, steps and GPU count are the run's."""
    return [sid for sid, f in sorted(facts.items()) if not mismatches(run, f)]


def not_allowed(found: Iterable[Mapping[str, Any]], allow: Sequence[str] | None) -> list[str]:
    """The mismatched fields --allow-mismatch does not name (bare --allow-mismatch names every field)."""
    if allow is None:
        return [m["field"] for m in found]
    return [m["field"] for m in found if allow and m["field"] not in allow]
