"""Statistics over a campaign's cells: per-arm distributions, paired-round changes, a bootstrap interval of the
change, a verdict against a threshold, and stage-attributed outliers.

Pure functions over a campaign's cells (cell.Cell: ``index``, ``arm``, ``round``, ``position``, ``status`` and
``perf``). Only valid cells with a ``perf`` object count, less each warm engine's first measured request
(steady_state.py: the statistics and the verdict are on the steady state; those requests are reported beside it).
Outliers are flagged, never dropped, unless the caller asks (``discard_outliers``); the result lists what was
discarded.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable, Mapping, Sequence

from .. import advice
from . import steady_state
from .distribution import describe, out_of_range, relative_change_pct, safe_mean
from .sample_size import DEFAULT_MIN_ROUNDS, MAX_CV_PCT, advice_for, noise_floor
from ..judging.cell import Cell

DEFAULT_THRESHOLD_PCT = 1.5
DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 20260101
DEFAULT_CONFIDENCE = 0.95
OUTLIER_Z = 3.5  # Iglewicz & Hoaglin's cut for the modified z-score
MAD_FLOOR_FRACTION = 0.001  # spreads under 0.1 % of the median are timer noise, not a scale to divide by
METRICS = ("e2e_ms", "denoise_ms")
VERDICTS = ("improved", "regressed", "no_significant_change", "insufficient_data")  # + validity.OUTPUTS_DIFFER
BOOTSTRAP_METHOD = ("percentile bootstrap of the relative change of means; cells resampled with replacement "
                    "within each arm (and within each round when the cells have rounds)")


def decision_rule(threshold_pct: float, confidence: float, min_rounds: int) -> str:
    """The verdict rule, in words, as every comparison states it."""
    pct = f"{confidence * 100:g}%"
    return (f"change = (candidate mean - baseline mean) / baseline mean. 'improved' when the {pct} bootstrap "
            f"interval of the change lies entirely below -{threshold_pct:g}% AND every round's change is negative; "
            f"'regressed' when it lies entirely above +{threshold_pct:g}% AND every round's change is positive; "
            f"'insufficient_data' when an arm has fewer than 2 used cells, when, for cells with rounds, fewer than "
            f"{min_rounds} rounds have both arms, or when either arm's coefficient of variation exceeds "
            f"{MAX_CV_PCT:g}% (too noisy to support any verdict); otherwise 'no_significant_change'. Cells without "
            f"rounds (perf dumps compared as groups) are judged on the interval alone: run an A/B/B/A campaign to "
            f"show the change repeats.")


def used_cells(cells: Iterable[Cell], arm: str | None = None, steady: bool = True) -> list[Cell]:
    """Valid cells with a perf object; ``steady``: less each warm engine's first measured request (steady_state)."""
    apart = steady_state.excluded(cells := list(cells)) if steady else set()
    return [c for c in cells if c.valid and c.perf and (arm is None or c.arm == arm) and c.index not in apart]


def _metric(cell: Cell, metric: str) -> float | None:
    value = cell.metric(metric)
    return None if value is None else float(value)


def find_outliers(cells: Sequence[Cell], arm: str, z_threshold: float = OUTLIER_Z
                  ) -> list[dict[str, Any]]:
    """Cells whose e2e is far from the arm's median (modified z-score, MAD floored at 0.1 % of the median), each
    attributed to the stage that moved most against the arm's median stage times."""
    arm_cells = used_cells(cells, arm)
    if len(arm_cells) < 3:
        return []
    e2e = [c.perf["e2e_ms"] for c in arm_cells]
    median = statistics.median(e2e)
    mad = max(statistics.median(abs(v - median) for v in e2e), MAD_FLOOR_FRACTION * abs(median))
    stage_medians = _stage_medians(arm_cells)
    found = []
    for cell, value in zip(arm_cells, e2e, strict=True):
        z = 0.6745 * (value - median) / mad
        if abs(z) < z_threshold:
            continue
        found.append({"cell": cell.index, "arm": arm, "round": cell.round, "position": cell.position,
                      "metric": "e2e_ms", "value_ms": value, "arm_median_ms": median, "robust_z": z,
                      "discarded": False, **_attribute(cell, value - median, stage_medians)})
    return found


def _stage_medians(cells: Sequence[Cell]) -> dict[str, float]:
    names = {n for c in cells for n in c.perf["stages"]}  # a set: order does not matter here
    return {n: statistics.median(c.perf["stages"][n] for c in cells if n in c.perf["stages"])
            for n in names}


def _attribute(cell: Cell, deviation_ms: float, stage_medians: Mapping[str, float]) -> dict[str, Any]:
    """The stage whose time moved most in the direction of the e2e deviation."""
    sign = 1 if deviation_ms >= 0 else -1
    deltas = {n: ms - stage_medians[n] for n, ms in cell.perf["stages"].items() if n in stage_medians}
    if not deltas:
        return {"attributed_stage": None, "stage_ms": None, "stage_median_ms": None, "stage_delta_ms": None,
                "share_of_deviation": None}
    stage = max(deltas, key=lambda n: sign * deltas[n])
    return {"attributed_stage": stage, "stage_ms": cell.perf["stages"][stage],
            "stage_median_ms": stage_medians[stage], "stage_delta_ms": deltas[stage],
            "share_of_deviation": deltas[stage] / deviation_ms if deviation_ms else None}


def arm_summary(cells: Sequence[Cell], arm: str, discard_outliers: bool = False) -> dict[str, Any]:
    """Distributions over the arm's steady state (valid cells less each warm engine's first measured request, which
    ``first_requests`` reports beside it; minus discarded outliers, when asked)."""
    outliers = find_outliers(cells, arm)
    discarded = [o["cell"] for o in outliers] if discard_outliers else []
    for o in outliers:
        o["discarded"] = o["cell"] in discarded
    used = [c for c in used_cells(cells, arm) if c.index not in discarded]
    stage_names = list(dict.fromkeys(n for c in used for n in c.perf.get("stage_order", c.perf["stages"])))
    kinds = {c.perf["memory_kind"] for c in used if c.perf.get("peak_memory_mb") is not None}
    return {
        "arm": arm,
        "n_cells": sum(1 for c in cells if c.arm == arm),
        "n_valid": len(used_cells(cells, arm, steady=False)),
        "n_used": len(used),
        "discarded_cells": discarded,
        "first_requests": steady_state.first_requests(cells, arm),
        **{m: describe([_metric(c, m) for c in used])
           for m in ("e2e_ms", "denoise_ms", "step0_ms", "steady_step_mean_ms", "peak_memory_mb")},
        "memory_kind": kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else None),
        "denoise_sources": sorted({c.perf["denoise_source"] for c in used if c.perf.get("denoise_source")}),
        "stages": {n: describe([c.perf["stages"].get(n) for c in used]) for n in stage_names},
        "outliers": outliers,
    }


def _bootstrap_interval(baseline: Sequence[Sequence[float]], candidate: Sequence[Sequence[float]], *,
                        resamples: int, seed: int, confidence: float) -> tuple[float, float]:
    """The percentile-bootstrap interval (%) of the relative change of means; each inner sequence is one stratum (a
    round), resampled within itself. numpy is imported here, not at the top: a refused run never needs it."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def resampled_means(strata: Sequence[Sequence[float]]) -> np.ndarray:
        total = np.zeros(resamples)
        count = sum(len(s) for s in strata)
        for stratum in strata:
            values = np.asarray(stratum, dtype=float)
            picks = rng.integers(0, len(values), size=(resamples, len(values)))
            total += values[picks].sum(axis=1)
        return total / count

    base = resampled_means(baseline)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        changes = (resampled_means(candidate) - base) / base * 100
    if not np.isfinite(changes).all():  # a resampled baseline mean of 0, or one so small the change overflows
        raise out_of_range("the bootstrap change (a baseline mean at or near 0)")
    tail = (1 - confidence) / 2 * 100
    low, high = (float(v) for v in np.percentile(changes, [tail, 100 - tail]))
    return low, high


def worst_cv_pct(cells: Sequence[Cell], arms: Sequence[str], metric: str) -> float | None:
    """The larger coefficient of variation of ``metric`` over the arms' used cells: the CV gate's figure."""
    cvs = [describe([_metric(c, metric) for c in used_cells(cells, arm)])["cv_pct"] for arm in arms]
    known = [v for v in cvs if v is not None]
    return max(known) if known else None


def change_interval(base: Sequence[Cell], cand: Sequence[Cell], metric: str, *, resamples: int, seed: int,
                    confidence: float) -> tuple[float | None, float | None, str | None]:
    """The one interval of a reported change: the percentile bootstrap of the relative change of the steady-state
    means, resampled within each round that has both arms (pooled when none has). (low, high, None), or (None, None,
    why there is none)."""
    if len(base) < 2 or len(cand) < 2:
        return None, None, (f"no interval: {len(base)} baseline and {len(cand)} candidate cells with {metric}; an "
                            "interval needs 2 each")
    rounds = sorted({c.round for c in base if c.round is not None} & {c.round for c in cand if c.round is not None})
    base_strata = [[_metric(c, metric) for c in base if c.round == r] for r in rounds]
    cand_strata = [[_metric(c, metric) for c in cand if c.round == r] for r in rounds]
    if sum(map(len, base_strata)) < 2 or sum(map(len, cand_strata)) < 2:  # no round with both arms: pooled
        base_strata, cand_strata = [[_metric(c, metric) for c in base]], [[_metric(c, metric) for c in cand]]
    low, high = _bootstrap_interval(base_strata, cand_strata, resamples=resamples, seed=seed, confidence=confidence)
    return low, high, None


def metric_change(cells: Sequence[Cell], baseline: str, candidate: str, metric: str, **options: Any
                  ) -> dict[str, Any]:
    """The change of one metric (relative change of the steady-state means), its one interval (change_interval),
    per-round changes (secondary: did every round agree), the verdict, and the advice when there is none."""
    result = _judged_change(cells, baseline, candidate, metric, **options)
    result["advice"] = advice_for(result)
    return result


def _judged_change(cells: Sequence[Cell], baseline: str, candidate: str, metric: str, *,
                   threshold_pct: float = DEFAULT_THRESHOLD_PCT, resamples: int = DEFAULT_RESAMPLES,
                   seed: int = DEFAULT_SEED, confidence: float = DEFAULT_CONFIDENCE,
                   min_rounds: int = DEFAULT_MIN_ROUNDS, exclude: Iterable[int] = ()) -> dict[str, Any]:
    excluded = set(exclude)
    pick = [c for c in used_cells(cells) if c.index not in excluded and _metric(c, metric) is not None]
    base = [c for c in pick if c.arm == baseline]
    cand = [c for c in pick if c.arm == candidate]
    result: dict[str, Any] = {"metric": metric, "baseline_mean": None, "candidate_mean": None, "change_pct": None,
                              "ci_low_pct": None, "ci_high_pct": None, "interval_reason": None,
                              "round_changes_pct": [], "rounds_same_direction": None}
    if base:
        result["baseline_mean"] = safe_mean([_metric(c, metric) for c in base])
    if cand:
        result["candidate_mean"] = safe_mean([_metric(c, metric) for c in cand])
    result["change_pct"] = relative_change_pct(result["baseline_mean"], result["candidate_mean"])

    has_rounds = any(c.round is not None for c in pick)
    rounds = sorted({c.round for c in pick if c.round is not None})
    complete = [r for r in rounds if any(c.round == r for c in base) and any(c.round == r for c in cand)]
    for r in rounds:
        result["round_changes_pct"].append(relative_change_pct(
            _mean([_metric(c, metric) for c in base if c.round == r]),
            _mean([_metric(c, metric) for c in cand if c.round == r])))

    per_round = max((sum(1 for c in base if c.round == r) for r in rounds), default=0)
    result["noise_floor"] = noise_floor([_metric(c, metric) for c in base], [_metric(c, metric) for c in cand],
                                        threshold_pct=threshold_pct, confidence=confidence,
                                        cells_per_round=per_round or 2)
    low, high, why = change_interval(base, cand, metric, resamples=resamples, seed=seed, confidence=confidence)
    result.update(ci_low_pct=low, ci_high_pct=high, interval_reason=why)
    if result["change_pct"] is None and why is None:
        result["interval_reason"] = "no change: an arm's mean is missing or 0"
    interval = "" if low is None else f"{confidence * 100:g}% CI [{low:+.3f}%, {high:+.3f}%]"
    if len(base) < 2 or len(cand) < 2:
        return {**result, "verdict": "insufficient_data",
                "reason": f"{len(base)} baseline and {len(cand)} candidate cells with {metric}; need 2 each"}
    if has_rounds and len(complete) < min_rounds:
        return {**result, "verdict": "insufficient_data",
                "reason": f"{len(complete)} round(s) with both arms; need {min_rounds}"}

    spreads = {arm: describe([_metric(c, metric) for c in group])["cv_pct"] for arm, group in
               ((baseline, base), (candidate, cand))}
    noisy = {arm: cv for arm, cv in spreads.items() if cv is not None and cv > MAX_CV_PCT}
    if noisy:
        worst = max(noisy, key=noisy.get)
        return {**result, "verdict": "insufficient_data",
                "reason": f"unstable: {metric} varies by CV {noisy[worst]:.1f}% in arm {worst!r} (limit "
                          f"{MAX_CV_PCT:g}%): too noisy for any verdict"}

    round_changes = [v for v in result["round_changes_pct"] if v is not None]
    all_down, all_up = all(v < 0 for v in round_changes), all(v > 0 for v in round_changes)
    result["rounds_same_direction"] = all_down or all_up if round_changes else None
    if not has_rounds:
        interval += " (no rounds: that the change repeats is not established)"
    faster, slower = (("every round is faster", "every round is slower") if has_rounds
                      else ("no rounds to repeat it",) * 2)
    if high < -threshold_pct and all_down:
        verdict, reason = "improved", f"{interval} is below -{threshold_pct:g}% ({faster})"
    elif low > threshold_pct and all_up:
        verdict, reason = "regressed", f"{interval} is above +{threshold_pct:g}% ({slower})"
    elif high < -threshold_pct or low > threshold_pct:
        verdict, reason = "no_significant_change", f"{interval} clears the threshold but the rounds disagree"
    else:
        verdict, reason = "no_significant_change", f"{interval} overlaps the +/-{threshold_pct:g}% band"
    return {**result, "verdict": verdict, "reason": reason}


def _mean(values: Sequence[float | None]) -> float | None:
    return safe_mean(vals) if (vals := [v for v in values if v is not None]) else None


def _change_of(base: Mapping[str, Any], cand: Mapping[str, Any]) -> dict[str, Any]:
    b, c = base.get("mean"), cand.get("mean")
    return {"baseline_mean_ms": b, "candidate_mean_ms": c,
            "change_ms": None if b is None or c is None else c - b, "change_pct": relative_change_pct(b, c)}


def compare_arms(cells: Sequence[Cell], baseline: str, candidate: str, arms: Mapping[str, Any], *,
                 threshold_pct: float = DEFAULT_THRESHOLD_PCT, primary_metric: str = "e2e_ms",
                 resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                 confidence: float = DEFAULT_CONFIDENCE, min_rounds: int = DEFAULT_MIN_ROUNDS,
                 command: str = advice.BENCH) -> dict[str, Any]:
    """The bench-report.v1 ``comparison``: ``arms`` are the two arm_summary() results (their discards apply);
    ``command`` is the one whose flags the next step may name (advice.py)."""
    discarded = sorted(arms[baseline]["discarded_cells"] + arms[candidate]["discarded_cells"])
    options = dict(threshold_pct=threshold_pct, resamples=resamples, seed=seed, confidence=confidence,
                   min_rounds=min_rounds, exclude=discarded)
    metrics = {m: metric_change(cells, baseline, candidate, m, **options) for m in METRICS}
    for m in metrics.values():
        m["next_step"] = advice.render(m["advice"], command)
    pick = [c for c in used_cells(cells) if c.index not in discarded]
    rounds = []
    for r in sorted({c.round for c in pick if c.round is not None}):
        base = [c for c in pick if c.round == r and c.arm == baseline]
        cand = [c for c in pick if c.round == r and c.arm == candidate]
        rounds.append({"round": r, "baseline_cells": [c.index for c in base],
                       "candidate_cells": [c.index for c in cand],
                       **{f"{m[:-3]}_change_pct": relative_change_pct(_mean([_metric(c, m) for c in base]),
                                                                      _mean([_metric(c, m) for c in cand]))
                          for m in METRICS}})
    b_arm, c_arm = arms[baseline], arms[candidate]
    stage_names = list(dict.fromkeys([*b_arm["stages"], *c_arm["stages"]]))
    empty = describe([])
    kinds = {k for k in (b_arm["memory_kind"], c_arm["memory_kind"]) if k}
    b_peak, c_peak = b_arm["peak_memory_mb"]["max"], c_arm["peak_memory_mb"]["max"]
    sources = sorted({c.perf["peak_memory_source"] for c in pick
                      if c.arm in (baseline, candidate) and c.perf.get("peak_memory_source")})
    return {
        "baseline_arm": baseline, "candidate_arm": candidate, "threshold_pct": threshold_pct,
        "primary_metric": primary_metric, "verdict": metrics[primary_metric]["verdict"],
        "advice": metrics[primary_metric]["advice"], "next_step": metrics[primary_metric]["next_step"],
        "rule": decision_rule(threshold_pct, confidence, min_rounds), "min_rounds": min_rounds,
        "bootstrap": {"method": BOOTSTRAP_METHOD, "resamples": resamples, "seed": seed, "confidence": confidence},
        "metrics": metrics,
        "rounds": rounds,
        "stages": {n: _change_of(b_arm["stages"].get(n, empty), c_arm["stages"].get(n, empty)) for n in stage_names},
        "steps": {m: _change_of(b_arm[m], c_arm[m]) for m in ("step0_ms", "steady_step_mean_ms")},
        "memory": {"memory_kind": kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else None),
                   "baseline_peak_mb": b_peak, "candidate_peak_mb": c_peak,
                   "change_mb": None if b_peak is None or c_peak is None else c_peak - b_peak,
                   "change_pct": relative_change_pct(b_peak, c_peak), "sources": sources},
        "discarded_cells": discarded,
        "steady_state": steady_state.comparison_block(cells),
    }


def summarize(cells: Sequence[Cell], arm_names: Sequence[str], baseline: str | None = None,
              candidate: str | None = None, *, discard_outliers: bool = False, **options: Any) -> dict[str, Any]:
    """``summary.arms`` and ``summary.comparison`` of a bench-report.v1 (output_quality is quality.py's)."""
    arms = {a: arm_summary(cells, a, discard_outliers) for a in arm_names}
    comparison = None
    if baseline is not None and candidate is not None:
        comparison = compare_arms(cells, baseline, candidate, arms, **options)
    return {"arms": arms, "comparison": comparison}
