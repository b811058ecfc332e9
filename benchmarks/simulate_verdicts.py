#!/usr/bin/env python3
"""How often does the verdict rule lie? Simulated A/B/B/A campaigns through stats.metric_change.

Each campaign: ROUNDS rounds of A/B/B/A (2 cells per arm per round), e2e drawn from a normal distribution with the
given CV around 4000 ms; the candidate mean is shifted by --change-pct. Reports the share of campaigns per verdict.
Targets: at CV 0.5 % with no change, 'improved' in < 1 % of campaigns; with a 3 % speed-up, 'improved' in >= 95 %.
Exit 1 when a target is missed.

  .venv/bin/python benchmarks/simulate_verdicts.py              # 1,000 campaigns per scenario
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from sgl_diffusion_bench import stats  # noqa: E402

BASE_MS = 4000.0
ORDER = ("A", "B", "B", "A")


def simulated_cells(rng: np.random.Generator, rounds: int, cv_pct: float, change_pct: float) -> list[dict]:
    cells = []
    for rnd in range(1, rounds + 1):
        for pos, letter in enumerate(ORDER):
            mean = BASE_MS * (1 + change_pct / 100) if letter == "B" else BASE_MS
            e2e = float(rng.normal(mean, mean * cv_pct / 100))
            cells.append({"index": len(cells), "arm": letter, "round": rnd, "position": f"{letter}{pos}",
                          "status": "valid", "perf": {"e2e_ms": e2e}})
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


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--resamples", type=int, default=stats.DEFAULT_RESAMPLES)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
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
    print("targets met" if not failures else "TARGETS MISSED: " + "; ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
