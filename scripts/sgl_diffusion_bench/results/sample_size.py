"""How much data a verdict needs: the rounds and the spread it requires (the CV gate), what the samples at hand can
resolve (the smallest detectable effect at a confidence and power), how many samples a threshold needs, and the
advice when the data cannot support a verdict (more rounds, or a quieter host)."""

from __future__ import annotations

import math
import statistics
from typing import Any, Mapping, Sequence

from .. import advice
from .distribution import describe, finite, out_of_range

DEFAULT_MIN_ROUNDS = 2
MAX_CV_PCT = 10.0  # pyperf's instability line: a spread this wide drowns any change worth claiming
POWER = 0.80  # the chance to detect an effect of the smallest detectable size


def _z(p: float) -> float:
    return statistics.NormalDist().inv_cdf(p)


def noise_floor(base: Sequence[float], cand: Sequence[float], *, threshold_pct: float, confidence: float,
                cells_per_round: int) -> dict[str, Any]:
    """What this many samples can resolve, given whatever was measured, even when no verdict is possible: each
    arm's CV, the smallest effect detectable at ``confidence`` with POWER (two-sample normal approximation on the
    CVs), and how many samples per arm (and A/B/B/A rounds) a ``threshold_pct`` verdict needs. The interval of the
    change is the metric's own (ci_low_pct/ci_high_pct), never repeated here."""
    cv_b, cv_c = describe(base)["cv_pct"], describe(cand)["cv_pct"]
    result: dict[str, Any] = {"baseline_cv_pct": cv_b, "candidate_cv_pct": cv_c, "n_baseline": len(base),
                              "n_candidate": len(cand), "min_detectable_effect_pct": None, "confidence": confidence,
                              "power": POWER, "target_pct": threshold_pct, "samples_per_arm_needed": None,
                              "more_samples_per_arm": None, "rounds_needed": None}
    if cv_b is None or cv_c is None:
        return result
    z = _z(1 - (1 - confidence) / 2) + _z(POWER)
    try:
        mde = finite(z * ((cv_b ** 2 / len(base) + cv_c ** 2 / len(cand)) ** 0.5), "the smallest detectable effect")
    except OverflowError:
        raise out_of_range("the smallest detectable effect") from None
    needed = _samples_needed(z, cv_b, cv_c, threshold_pct)
    have = min(len(base), len(cand))
    result.update(min_detectable_effect_pct=mde, samples_per_arm_needed=needed,
                  more_samples_per_arm=None if needed is None else max(0, needed - have),
                  rounds_needed=None if needed is None else max(DEFAULT_MIN_ROUNDS,
                                                                math.ceil(needed / cells_per_round)))
    return result


MAX_SAMPLES_STATED = 10 ** 9  # a count past this is "out of reach", never a figure to act on


def _samples_needed(z: float, cv_b: float, cv_c: float, threshold_pct: float) -> int | None:
    """Samples per arm for a ``threshold_pct`` verdict at these CVs; capped at MAX_SAMPLES_STATED + 1 (a tiny
    threshold would overflow the float) so every consumer reads it as out of reach."""
    if threshold_pct <= 0:
        return None
    try:
        wanted = z ** 2 * (cv_b ** 2 + cv_c ** 2) / threshold_pct ** 2
    except (OverflowError, ZeroDivisionError):
        wanted = math.inf
    return math.ceil(wanted) if wanted <= MAX_SAMPLES_STATED else MAX_SAMPLES_STATED + 1


def too_noisy_advice(cv_pct: float | None, threshold_pct: float) -> str:
    """What to do when the spread fails the CV gate or no reachable sample count supports a verdict: make the host
    quieter. More samples do not cure a spread this wide, and a larger threshold does not loosen the CV gate."""
    spread = f"CV {cv_pct:.1f}%" if cv_pct is not None else "today's spread"
    return (f"this host is too noisy for a {threshold_pct:g}% threshold ({spread}; a verdict needs a CV of at most "
            f"{MAX_CV_PCT:g}% and enough samples within the {advice.MAX_ROUNDS} rounds a campaign may run): quiet the "
            f"host or pin the engine to its own cores (stop other jobs and benchmarks, idle the GPU), then re-measure "
            f"the noise floor with an A/A campaign of the same preset and compare again once its CV is under "
            f"{MAX_CV_PCT:g}%")


def advice_for(metric: Mapping[str, Any]) -> dict[str, Any] | None:
    """What to do when the data cannot support a verdict (advice.py), from the noise floor's figures. Never more
    rounds than the CLI accepts (advice.MAX_ROUNDS): past that, or when the spread fails the CV gate (which more
    rounds do not cure), the advice is to quiet the host, with no sample count."""
    if metric["verdict"] != "insufficient_data":
        return None
    floor = metric.get("noise_floor") or {}
    if floor.get("samples_per_arm_needed") is None:
        return advice.more_rounds("fixed", DEFAULT_MIN_ROUNDS, "a verdict needs at least 2 valid cells per arm in "
                                  f"at least {DEFAULT_MIN_ROUNDS} rounds")
    cvs = [v for v in (floor["baseline_cv_pct"], floor["candidate_cv_pct"]) if v is not None]
    worst = max(cvs) if cvs else None
    if (worst is not None and worst > MAX_CV_PCT) or floor["rounds_needed"] > advice.MAX_ROUNDS:
        return advice.quiet_host("fixed", too_noisy_advice(worst, floor["target_pct"]))
    return advice.more_rounds("fixed", floor["rounds_needed"], (
        f"{floor['samples_per_arm_needed']} samples per arm, {floor['more_samples_per_arm']} more than now, resolve "
        f"a {floor['target_pct']:g}% change at {floor['confidence'] * 100:g}% confidence and "
        f"{floor['power'] * 100:g}% power at today's spread"))
