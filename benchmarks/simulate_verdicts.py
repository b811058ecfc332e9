#!/usr/bin/env python3
"""How often does the verdict rule lie? Simulated A/B/B/A campaigns through stats.metric_change.

Each campaign: ROUNDS rounds of A/B/B/A (2 cells per arm per round), e2e drawn from a normal distribution with the
given CV around 4000 ms; the candidate mean is shifted by --change-pct. Reports the share of campaigns per verdict.
Targets: at CV 0.5 % with no change, 'improved' in < 1 % of campaigns; with a 3 % speed-up, 'improved' in >= 95 %.
With --sequential it also runs the --until-verdict rule (sequential.py): rounds one at a time up to --budget-rounds,
a Bonferroni-corrected look after each; reported per scenario: false or true verdict rates, why campaigns stopped,
and the mean rounds used. Sequential targets: on A/A, 'improved' + 'regressed' together in <= 1 % of campaigns at
every CV; a 3 % change detected in >= 95 % at CV 0.5 %.
Exit 1 when a target is missed.

  .venv/bin/python benchmarks/simulate_verdicts.py              # 1,000 campaigns per scenario
  .venv/bin/python benchmarks/simulate_verdicts.py --sequential --resamples 2000
  .venv/bin/python benchmarks/simulate_verdicts.py --noisy      # CV 5/20/100 %: false "no change" <= 1 %
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from sgl_diffusion_bench.campaign import sequential  # noqa: E402
from sgl_diffusion_bench.results import stats  # noqa: E402
from sgl_diffusion_bench.judging.cell import Cell  # noqa: E402

BASE_MS = 4000.0
ORDER = ("A", "B", "B", "A")


def simulated_cells(rng: np.random.Generator, rounds: int, cv_pct: float, change_pct: float,
                    first_round: int = 1, lognormal: bool = False) -> list[Cell]:
    """Normal e2e (the small-CV scenarios), or log-normal with the same mean and CV: timings on a noisy host are
    positive and skewed, and a normal with CV 100 % would draw negative times."""
    sigma = float(np.sqrt(np.log1p((cv_pct / 100) ** 2)))
    cells = []
    for rnd in range(first_round, first_round + rounds):
        for pos, letter in enumerate(ORDER):
            mean = BASE_MS * (1 + change_pct / 100) if letter == "B" else BASE_MS
            e2e = float(mean * rng.lognormal(-sigma ** 2 / 2, sigma) if lognormal
                        else rng.normal(mean, mean * cv_pct / 100))
            cells.append(Cell(index=len(cells), arm=letter, round=rnd, position=f"{letter}{pos}", status="valid",
                              perf={"e2e_ms": e2e}))
    return cells


def verdict_rates(campaigns: int, rounds: int, cv_pct: float, change_pct: float, seed: int, resamples: int,
                  threshold_pct: float = stats.DEFAULT_THRESHOLD_PCT) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    counts = collections.Counter()
    for i in range(campaigns):
        cells = simulated_cells(rng, rounds, cv_pct, change_pct)
        counts[stats.metric_change(cells, "A", "B", "e2e_ms", threshold_pct=threshold_pct, resamples=resamples,
                                   seed=stats.DEFAULT_SEED + i)["verdict"]] += 1
    return {v: counts[v] / campaigns for v in stats.VERDICTS}


def sequential_rates(campaigns: int, budget: int, cv_pct: float, change_pct: float, seed: int,
                     lognormal: bool = False) -> dict[str, float]:
    """Verdict shares, stop reasons and mean rounds of --until-verdict campaigns, through sequential.look itself."""
    rule = sequential.StoppingRule(stats.DEFAULT_THRESHOLD_PCT, budget)
    rng = np.random.default_rng(seed)
    verdicts, stops, rounds_used = collections.Counter(), collections.Counter(), []
    for _ in range(campaigns):
        cells: list[Cell] = []
        for rnd in range(1, budget + 1):
            cells += [dataclasses.replace(c, index=len(cells) + k)
                      for k, c in enumerate(simulated_cells(rng, 1, cv_pct, change_pct, first_round=rnd,
                                                             lognormal=lognormal))]
            if rnd < rule.min_rounds:
                continue
            seen = sequential.look(rule, cells, "A", "B", rnd)
            if seen["stop"]:
                verdicts[seen["verdict"]] += 1
                stops[seen["stop"]] += 1
                rounds_used.append(rnd)
                break
    out = {v: verdicts[v] / campaigns for v in stats.VERDICTS}
    out.update({f"stop:{k}": stops[k] / campaigns for k in sequential.STOP_REASONS})
    out["mean_rounds"] = float(np.mean(rounds_used))
    return out


def run_sequential(args: argparse.Namespace) -> list[str]:
    scenarios = [(f"A/A, CV {cv:g}%", cv, 0.0) for cv in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)]
    scenarios += [(f"3% faster, CV {cv:g}%", cv, -3.0) for cv in (0.5, 1.0, 2.0)]
    scenarios += [("3% slower, CV 0.5%", 0.5, 3.0), ("1% faster (below threshold), CV 0.5%", 0.5, -1.0)]
    rule = sequential.StoppingRule(stats.DEFAULT_THRESHOLD_PCT, args.budget_rounds)
    print(f"\nsequential (--until-verdict): {args.campaigns} campaigns per scenario, budget {args.budget_rounds} "
          f"rounds, look confidence {rule.look_confidence:.5f} (between-round t interval of the change)")
    print(f"{'scenario':38} {'improved':>9} {'regressed':>9} {'no-change':>9} {'insuff.':>8} "
          f"{'stop:verdict':>12} {'stop:equiv':>10} {'stop:budget':>11} {'rounds':>7}")
    failures = []
    for name, cv, change in scenarios:
        r = sequential_rates(args.campaigns, args.budget_rounds, cv, change, args.seed)
        print(f"{name:38} {r['improved'] * 100:8.1f}% {r['regressed'] * 100:8.1f}% "
              f"{r['no_significant_change'] * 100:8.1f}% {r['insufficient_data'] * 100:7.1f}% "
              f"{r['stop:verdict'] * 100:11.1f}% {r['stop:equivalent'] * 100:9.1f}% {r['stop:budget'] * 100:10.1f}% "
              f"{r['mean_rounds']:7.2f}", flush=True)
        if change == 0.0 and r["improved"] + r["regressed"] > 0.01:
            failures.append(f"sequential false verdicts above 1% ({name})")
        if name == "3% faster, CV 0.5%" and r["improved"] < 0.95:
            failures.append("sequential: 3% speed-up detected in under 95% of campaigns at CV 0.5%")
        if name == "3% slower, CV 0.5%" and r["regressed"] < 0.95:
            failures.append("sequential: 3% slow-down detected in under 95% of campaigns at CV 0.5%")
    return failures


def run_noisy(args: argparse.Namespace) -> list[str]:
    """Issue 24: on a noisy host the sequential rule must answer 'insufficient_data', never 'no change', when the
    true change exceeds the threshold (false 'no change' <= 1 %), and no false 'improved'/'regressed' on A/A."""
    threshold = stats.DEFAULT_THRESHOLD_PCT
    print(f"\nnoisy hosts (--until-verdict, log-normal e2e): {args.campaigns} campaigns per scenario, budget "
          f"{args.budget_rounds} rounds, threshold {threshold:g}%")
    print(f"{'scenario':30} {'improved':>9} {'regressed':>9} {'no-change':>9} {'insuff.':>8} {'rounds':>7}")
    failures = []
    for cv in (5.0, 20.0, 100.0):
        for change in (0.0, -3.0, 3.0, -10.0, 10.0, -50.0):
            name = f"CV {cv:g}%, true change {change:+g}%"
            r = sequential_rates(args.campaigns, args.budget_rounds, cv, change, args.seed, lognormal=True)
            print(f"{name:30} {r['improved'] * 100:8.1f}% {r['regressed'] * 100:8.1f}% "
                  f"{r['no_significant_change'] * 100:8.1f}% {r['insufficient_data'] * 100:7.1f}% "
                  f"{r['mean_rounds']:7.2f}", flush=True)
            if abs(change) > threshold and r["no_significant_change"] > 0.01:
                failures.append(f"false 'no change' above 1% ({name})")
            if change == 0.0 and r["improved"] + r["regressed"] > 0.01:
                failures.append(f"false verdicts above 1% ({name})")
            wrong = r["regressed"] if change < 0 else r["improved"] if change > 0 else 0.0
            if wrong > 0.01:
                failures.append(f"verdict in the wrong direction above 1% ({name})")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--resamples", type=int, default=stats.DEFAULT_RESAMPLES)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sequential", action="store_true", help="also simulate the --until-verdict rule")
    parser.add_argument("--only-sequential", action="store_true", help="simulate only the --until-verdict rule")
    parser.add_argument("--budget-rounds", type=int, default=sequential.DEFAULT_BUDGET_ROUNDS)
    parser.add_argument("--noisy", action="store_true",
                        help="simulate only the --until-verdict rule on noisy hosts (CV 5 %%, 20 %%, 100 %%)")
    args = parser.parse_args()
    if args.noisy:
        failures = run_noisy(args)
        print("targets met" if not failures else "TARGETS MISSED: " + "; ".join(failures))
        return 1 if failures else 0
    if args.only_sequential:
        failures = run_sequential(args)
        print("targets met" if not failures else "TARGETS MISSED: " + "; ".join(failures))
        return 1 if failures else 0
    scenarios = [("A/A, CV 0.5%", 0.5, 0.0), ("3% faster, CV 0.5%", 0.5, -3.0), ("3% slower, CV 0.5%", 0.5, 3.0),
                 ("A/A, CV 1.0% (info)", 1.0, 0.0), ("3% faster, CV 1.0% (info)", 1.0, -3.0)]
    print(f"{args.campaigns} campaigns per scenario, {args.rounds} A/B/B/A rounds, {args.resamples} bootstrap "
          f"resamples, threshold {stats.DEFAULT_THRESHOLD_PCT}%")
    print(f"{'scenario':28} " + " ".join(f"{v:>22}" for v in stats.VERDICTS))
    results = {}
    for name, cv, change in scenarios:
        started = time.perf_counter()
        rates = verdict_rates(args.campaigns, args.rounds, cv, change, args.seed, args.resamples)
        results[name] = rates
        print(f"{name:28} " + " ".join(f"{rates[v] * 100:21.1f}%" for v in stats.VERDICTS)
              + f"   ({time.perf_counter() - started:.1f} s)")
    failures = []
    if results["A/A, CV 0.5%"]["improved"] > 0.01:
        failures.append("false 'improved' above 1% at CV 0.5%")
    if results["3% faster, CV 0.5%"]["improved"] < 0.95:
        failures.append("3% speed-up detected in under 95% of campaigns")
    if results["3% slower, CV 0.5%"]["regressed"] < 0.95:
        failures.append("3% slow-down detected in under 95% of campaigns")
    if args.sequential:
        failures += run_sequential(args)
    print("targets met" if not failures else "TARGETS MISSED: " + "; ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
