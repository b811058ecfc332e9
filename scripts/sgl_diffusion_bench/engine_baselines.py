"""Compare a run with the performance baselines the installed engine ships for its nightly CI
(``sglang/multimodal_gen/test/server/perf_baselines/{h100,b200,5090,xpu_b60}.json``), read at run time from the
engine, never copied: per scenario expected e2e, stage times, denoise steps and VRAM, judged with the engine's own
tolerances (``pr_test`` or ``long_term``) and its own bound, max(expected * (1 + tol), expected + min_abs).

A comparison needs the matching scenario on the matching GPU class; when either is missing the result says so
plainly (``matched: false`` with the reason) instead of comparing against the nearest thing.
"""

from __future__ import annotations

import ast
import statistics
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import contract, inputs

BASELINE_DIR = Path("multimodal_gen/test/server/perf_baselines")
CHECKER_SOURCE = Path("multimodal_gen/test/server/test_server_utils.py")
GPU_CLASSES = {"h100": "h100.json", "b200": "b200.json", "5090": "5090.json", "xpu_b60": "xpu_b60.json"}
# How a GPU's name maps to the class whose CI pool recorded the numbers (the engine's own aliases, by name).
NAME_HINTS = (("H100", "h100"), ("B200", "b200"), ("5090", "5090"), ("B60", "xpu_b60"))
PROFILES = ("pr_test", "long_term")
# The checker's defaults (test_server_utils.py) when its source cannot be read: timing pad 20 ms, memory 128 MiB.
DEFAULT_MIN_ABS = {"timing": 20.0, "stage": 120.0, "memory": 128.0}


def gpu_class_of(gpu_name: str | None) -> str | None:
    for hint, cls in NAME_HINTS:
        if gpu_name and hint.lower() in gpu_name.lower():
            return cls
    return None


def load_baselines(package_dir: str | Path, gpu_class: str) -> dict[str, Any]:
    path = Path(package_dir) / BASELINE_DIR / GPU_CLASSES[gpu_class]
    if not path.exists():
        raise contract.PreconditionError("baseline.not_shipped", f"the installed engine has no {path}",
                                         "use sglang 0.5.23 or newer, whose wheel ships its CI perf baselines")
    try:  # a regular file only (a FIFO or device is refused before it is read), strict JSON (no NaN, bounded nesting)
        document = inputs.load_json(path, "baseline.unreadable")
    except contract.InputError as exc:
        raise contract.InputError("baseline.unreadable", exc.message, "reinstall the engine") from None
    return {"path": str(path), **document}


def checker_constants(package_dir: str | Path) -> dict[str, float]:
    """The engine checker's module constants (first-step and decoding allowances), read from its source."""
    found: dict[str, float] = {}
    try:
        tree = ast.parse((Path(package_dir) / CHECKER_SOURCE).read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
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
    return {"metric": metric, "actual": actual, "expected": expected, "tolerance": tol, "min_abs": min_abs,
            "limit": limit, "change_pct": (actual - expected) / expected * 100,
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
                         tolerances["runtime_peak_vram"], DEFAULT_MIN_ABS["memory"]))
    compared = [r for r in rows if r["status"] != "not_compared"]
    over = [r["metric"] for r in compared if r["status"] == "over"]
    verdict = "no_figures" if not compared else ("over_baseline" if over else "within_baseline")
    return {"matched": True, "scenario": scenario, "profile": profile, "tolerances": tolerances,
            "measured": got, "rows": rows, "over": over, "verdict": verdict}


def no_match(reason: str, available: Sequence[str] = ()) -> dict[str, Any]:
    return {"matched": False, "reason": reason, "available_scenarios": list(available), "verdict": "no_match"}
