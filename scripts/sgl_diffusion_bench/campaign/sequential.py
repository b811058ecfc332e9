"""Sample until the answer is known: the stopping rule of ``--until-verdict``. Pure: cells in, a decision out.

After each complete A/B/B/A round (from ``min_rounds`` on) the campaign looks at the primary metric's change: the
relative change of the steady-state means, the one change every surface reports (stats.metric_change), with a
Student-t interval whose spread is taken between rounds (clustered_change: each round's influence on the ratio of
means; pairing by round cancels slow drift). It stops when that interval excludes both -threshold and +threshold:
entirely beyond one of them with every round agreeing ("improved"/"regressed"), or entirely between them
("no_significant_change": no change worth claiming); otherwise it runs another round, until the budget of rounds is
spent ("insufficient_data": the data cannot tell). A look whose arms vary by more than sample_size.MAX_CV_PCT
supports no verdict at all, as in the fixed-round rule.

Why not the bootstrap of ``stats``: with two cells per arm per round the percentile bootstrap's interval is too
narrow (it cannot see the spread it never sampled), and looking after every round multiplies its chances of a false
verdict. The between-round t interval has its stated coverage at any CV, and each look uses a Bonferroni share
of the error: confidence 1 - (1 - overall) / looks, where ``looks`` is the most the budget allows. By the union
bound the chance of any false "improved"/"regressed" on an A/A campaign stays under 1 - overall (1 %) at any CV;
benchmarks/simulate_verdicts.py --sequential measures it. With --until-verdict the report's verdict is this rule's,
and the primary metric's interval is the last look's.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any, Mapping, Sequence

from .. import advice, contract
from ..results import distribution, sample_size, stats
from ..judging.cell import Cell

DEFAULT_BUDGET_ROUNDS = 8
DEFAULT_OVERALL_CONFIDENCE = 0.99
STOP_REASONS = ("verdict", "equivalent", "budget")


@dataclasses.dataclass(frozen=True)
class StoppingRule:
    threshold_pct: float
    budget_rounds: int
    min_rounds: int = sample_size.DEFAULT_MIN_ROUNDS
    overall_confidence: float = DEFAULT_OVERALL_CONFIDENCE
    metric: str = "e2e_ms"

    def __post_init__(self) -> None:
        if self.budget_rounds < self.min_rounds:
            raise contract.UsageError("usage.bad_budget", f"--budget-rounds {self.budget_rounds} is below the "
                                      f"{self.min_rounds} rounds any verdict needs",
                                      f"use --budget-rounds {self.min_rounds} or more")

    @property
    def looks(self) -> int:
        return self.budget_rounds - self.min_rounds + 1

    @property
    def look_confidence(self) -> float:
        return 1 - (1 - self.overall_confidence) / self.looks

    def describe(self) -> str:
        return (f"sequential: after each round from round {self.min_rounds}, the {self.look_confidence * 100:.4g}% "
                f"Student-t interval (spread between rounds) of the {self.metric} change of means (Bonferroni over "
                f"{self.looks} looks, "
                f"overall {self.overall_confidence * 100:g}%); stop with 'improved'/'regressed' when it lies entirely "
                f"below -{self.threshold_pct:g}% / above +{self.threshold_pct:g}% and every round agrees, with "
                f"'no_significant_change' only when it lies inside +/-{self.threshold_pct:g}%; 'insufficient_data' "
                f"when either arm's CV exceeds {sample_size.MAX_CV_PCT:g}% or {self.budget_rounds} rounds are spent "
                "first")


def round_changes(cells: Sequence[Cell], baseline: str, candidate: str, metric: str) -> list[float]:
    """One relative change (%) per round that has valid cells of both arms."""
    used = stats.used_cells(cells)
    out = []
    for r in sorted({c.round for c in used if c.round is not None}):
        base = [c.metric(metric) for c in used if c.round == r and c.arm == baseline and c.metric(metric) is not None]
        cand = [c.metric(metric) for c in used if c.round == r and c.arm == candidate and c.metric(metric) is not None]
        if base and cand:
            out.append((statistics.fmean(cand) - statistics.fmean(base)) / statistics.fmean(base) * 100)
    return out


def clustered_change(cells: Sequence[Cell], baseline: str, candidate: str, metric: str,
                     confidence: float) -> dict[str, Any] | None:
    """The reported change (the relative change of the steady-state means, as stats.metric_change gives it) with a
    Student-t interval whose spread is taken between rounds: each round's influence on the ratio of means, summed
    over its cells of both arms (a drift both arms share in a round cancels), gives a cluster-robust standard error
    with rounds - 1 degrees of freedom. None with fewer than 2 rounds holding both arms."""
    used = [c for c in stats.used_cells(cells) if c.metric(metric) is not None]
    base = [c for c in used if c.arm == baseline]
    cand = [c for c in used if c.arm == candidate]
    rounds = sorted({c.round for c in base if c.round is not None} & {c.round for c in cand if c.round is not None})
    if len(rounds) < 2:
        return None
    b_mean = distribution.safe_mean([c.metric(metric) for c in base])
    c_mean = distribution.safe_mean([c.metric(metric) for c in cand])
    if not b_mean:
        return None
    ratio = c_mean / b_mean
    influence = dict.fromkeys(rounds, 0.0)
    for c in cand:
        if c.round in influence:
            influence[c.round] += (c.metric(metric) - c_mean) / (len(cand) * b_mean)
    for c in base:
        if c.round in influence:
            influence[c.round] -= ratio * (c.metric(metric) - b_mean) / (len(base) * b_mean)
    n = len(rounds)
    se = math.sqrt(n / (n - 1) * math.fsum(v * v for v in influence.values()))
    half = t_quantile(1 - (1 - confidence) / 2, n - 1) * se
    return {"change_pct": distribution.finite((ratio - 1) * 100, "the change"), "ci_low_pct": (ratio - half - 1) * 100,
            "ci_high_pct": (ratio + half - 1) * 100, "rounds": n, "round_change_sd_pct": se * math.sqrt(n) * 100}


def look(rule: StoppingRule, cells: Sequence[Cell], baseline: str, candidate: str,
         rounds_done: int) -> dict[str, Any]:
    """One look after ``rounds_done`` rounds: the change with its interval (clustered_change), the verdict, whether
    to stop.

    A verdict needs the data to support it: 'improved'/'regressed' when the interval lies beyond one threshold and
    every round agrees, 'no_significant_change' only when it lies inside the band; anything else, and any look whose
    spread fails the CV gate (sample_size.MAX_CV_PCT, which more rounds do not cure), is 'insufficient_data'."""
    changes = round_changes(cells, baseline, candidate, rule.metric)
    cv = stats.worst_cv_pct(cells, (baseline, candidate), rule.metric)
    t = rule.threshold_pct
    estimate = clustered_change(cells, baseline, candidate, rule.metric, rule.look_confidence)
    low = high = mean = spread = None
    verdict, stop, reason = "insufficient_data", None, f"{len(changes)} round(s) with both arms; need {rule.min_rounds}"
    if estimate is not None and len(changes) >= max(rule.min_rounds, 2):
        mean, low, high = estimate["change_pct"], estimate["ci_low_pct"], estimate["ci_high_pct"]
        spread = estimate["round_change_sd_pct"]
        interval = f"{rule.look_confidence * 100:.4g}% interval [{low:+.3f}%, {high:+.3f}%]"
        if cv is not None and cv > sample_size.MAX_CV_PCT:
            reason = f"unstable: {rule.metric} varies by CV {cv:.1f}% (limit {sample_size.MAX_CV_PCT:g}%); {interval}"
        elif high < -t and all(c < 0 for c in changes):
            verdict, stop, reason = "improved", "verdict", f"{interval} is below -{t:g}% and every round is faster"
        elif low > t and all(c > 0 for c in changes):
            verdict, stop, reason = "regressed", "verdict", f"{interval} is above +{t:g}% and every round is slower"
        elif -t < low and high < t:
            verdict, stop, reason = "no_significant_change", "equivalent", f"{interval} lies inside +/-{t:g}%"
        else:
            reason = f"{interval} neither lies inside +/-{t:g}% nor beyond it with every round agreeing"
    if stop is None and rounds_done >= rule.budget_rounds:
        stop = "budget"
    return {"round": rounds_done, "verdict": verdict, "ci_low_pct": low, "ci_high_pct": high, "change_pct": mean,
            "stop": stop, "cv_pct": cv, "round_change_sd_pct": spread, "reason": reason}


def rounds_needed(rule: StoppingRule, round_change_sd_pct: float) -> int | None:
    """The smallest --budget-rounds (at most advice.MAX_ROUNDS) whose last look's interval, at this spread of
    round changes, is narrow enough to resolve the threshold with POWER: (t_look + t_power) * sd / sqrt(n) <= the
    threshold. None when even advice.MAX_ROUNDS rounds would not."""
    for budget in range(max(rule.min_rounds, 2), advice.MAX_ROUNDS + 1):
        trial = dataclasses.replace(rule, budget_rounds=budget)
        width = (t_quantile(1 - (1 - trial.look_confidence) / 2, budget - 1)
                 + t_quantile(sample_size.POWER, budget - 1)) \
            * round_change_sd_pct / math.sqrt(budget)
        if width <= rule.threshold_pct:
            return budget
    return None


def advice_for(rule: StoppingRule, final: Mapping[str, Any]) -> dict[str, Any] | None:
    """What to do when the campaign ended without a verdict (advice.py): a budget the CLI accepts, or quiet the
    host."""
    if final["verdict"] != "insufficient_data":
        return None
    cv, spread = final.get("cv_pct"), final.get("round_change_sd_pct")
    least = max(rule.min_rounds, 2)
    if spread is None:
        return advice.more_rounds("until_verdict", least, f"a verdict needs at least {least} complete rounds")
    needed = None if cv is not None and cv > sample_size.MAX_CV_PCT else rounds_needed(rule, spread)
    if needed is None:
        return advice.quiet_host("until_verdict", sample_size.too_noisy_advice(cv, rule.threshold_pct))
    return advice.more_rounds("until_verdict", needed, (
        f"at today's spread between rounds (sd {spread:.2f}% per round) that many rounds resolve a "
        f"{rule.threshold_pct:g}% change with {sample_size.POWER * 100:g}% power"))


def record(rule: StoppingRule, looks: Sequence[Mapping[str, Any]], rounds_run: int) -> dict[str, Any]:
    """The report's ``campaign.stopping``: the rule, every look, and why the campaign ended."""
    final = looks[-1]["stop"] if looks else None
    return {"rule": "until_verdict", "description": rule.describe(), "budget_rounds": rule.budget_rounds,
            "min_rounds": rule.min_rounds, "look_confidence": rule.look_confidence,
            "overall_confidence": rule.overall_confidence, "rounds_run": rounds_run,
            "stopped_because": final or "interrupted", "looks": [dict(x) for x in looks]}


def apply_to_comparison(comparison: dict[str, Any] | None, rule: StoppingRule,
                        looks: Sequence[Mapping[str, Any]]) -> None:
    """With --until-verdict the verdict, its reason, the next step and the primary metric's interval are the last
    look's: one change, one interval, the one the verdict was taken on (the other metrics keep the bootstrap's)."""
    if comparison is None or not looks or comparison.get("verdict") not in stats.VERDICTS:
        return  # no look yet, or validity already overruled the numbers (outputs differ)
    last = looks[-1]
    comparison["verdict"] = last["verdict"]
    comparison["rule"] = rule.describe()
    comparison["reason"] = last["reason"]
    comparison["advice"] = advice_for(rule, last)
    comparison["next_step"] = advice.render(comparison["advice"], advice.BENCH)  # only the bench command has the rule
    primary = comparison["metrics"][rule.metric]
    primary.update(verdict=last["verdict"], reason=last["reason"], advice=comparison["advice"],
                   next_step=comparison["next_step"])
    if last["ci_low_pct"] is not None:
        primary.update(ci_low_pct=last["ci_low_pct"], ci_high_pct=last["ci_high_pct"], interval_reason=None)
    else:
        primary.update(ci_low_pct=None, ci_high_pct=None,
                       interval_reason=f"no interval of the sequential rule yet: {last['reason']}")


# -- Student t quantile (no scipy: numpy is the only numeric dependency) ------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c if abs(1 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c if abs(1 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


def t_sf(t: float, df: int) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom, t >= 0."""
    return 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))


def t_quantile(p: float, df: int) -> float:
    """The t with P(T <= t) = p (p > 0.5), by bisection on the survival function."""
    target = 1 - p
    low, high = 0.0, 1.0
    while t_sf(high, df) > target:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        if t_sf(mid, df) > target:
            low = mid
        else:
            high = mid
    return (low + high) / 2
