"""stats: the seed PR's published means and reductions, the verdict rule, outliers, and simulated error rates."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from conftest import REPO, TEST_FIXTURES
from sgl_diffusion_bench import advice
from sgl_diffusion_bench.judging import perf_dump
from sgl_diffusion_bench.results import distribution, sample_size, stats
from sgl_diffusion_bench.judging.cell import Cell

SEED = TEST_FIXTURES / "seed-pr-38591"
ROWS = [(1, "A1", "eager"), (1, "B1", "bcg"), (1, "B2", "bcg"), (1, "A2", "eager"),
        (2, "A1", "eager"), (2, "B1", "bcg"), (2, "B2", "bcg"), (2, "A2", "eager")]


def seed_cells():
    cells = []
    for i, (rnd, pos, arm) in enumerate(ROWS):
        perf = perf_dump.load_perf_dump(SEED / f"r{rnd}-{pos.lower()}-{arm}.json", "device").to_json()
        cells.append(Cell(index=i, arm=arm, round=rnd, position=pos, status="valid", perf=perf))
    return cells


def within_last_digit(value, printed: str, scale=1.0):
    digits = len(printed.split(".")[1])
    return abs(value * scale - float(printed)) <= 10 ** -digits + 1e-12


def test_seed_pr_means_and_reductions():
    summary = stats.summarize(seed_cells(), ["eager", "bcg"], "eager", "bcg")
    eager, bcg = summary["arms"]["eager"], summary["arms"]["bcg"]
    assert within_last_digit(eager["e2e_ms"]["mean"], "4.315577", 1e-3)
    assert within_last_digit(bcg["e2e_ms"]["mean"], "4.177754", 1e-3)
    assert within_last_digit(eager["denoise_ms"]["mean"], "4.119540", 1e-3)
    assert within_last_digit(bcg["denoise_ms"]["mean"], "3.911356", 1e-3)
    cmp = summary["comparison"]
    assert within_last_digit(cmp["metrics"]["e2e_ms"]["change_pct"], "-3.194")
    assert within_last_digit(cmp["metrics"]["denoise_ms"]["change_pct"], "-5.054")
    assert [round(-r["e2e_change_pct"], 3) for r in cmp["rounds"]] == [4.771, 1.620]
    assert cmp["rounds"][0]["baseline_cells"] == [0, 3] and cmp["rounds"][0]["candidate_cells"] == [1, 2]
    # memory: 19.473 GiB -> 20.707 GiB from runtime_peak
    assert round(cmp["memory"]["baseline_peak_mb"] / 1024, 3) == 19.473
    assert round(cmp["memory"]["candidate_peak_mb"] / 1024, 3) == 20.707
    assert cmp["memory"]["sources"] == ["runtime_peak"]


def test_seed_pr_outlier_is_round_2_b1_text_encoding():
    summary = stats.summarize(seed_cells(), ["eager", "bcg"], "eager", "bcg")
    assert summary["arms"]["eager"]["outliers"] == []
    (outlier,) = summary["arms"]["bcg"]["outliers"]
    assert (outlier["cell"], outlier["round"], outlier["position"]) == (5, 2, "B1")
    assert outlier["attributed_stage"] == "TextEncodingStage" and outlier["stage_ms"] == 371.106
    assert 98 <= outlier["stage_median_ms"] <= 102
    assert outlier["share_of_deviation"] > 0.9 and outlier["discarded"] is False
    assert summary["arms"]["bcg"]["n_used"] == 4 and summary["comparison"]["discarded_cells"] == []


def test_seed_pr_verdicts_are_honest():
    """The outlier widens the E2E interval past the threshold band; denoise is clearly faster."""
    cmp = stats.summarize(seed_cells(), ["eager", "bcg"], "eager", "bcg")["comparison"]
    assert cmp["metrics"]["e2e_ms"]["verdict"] == "no_significant_change"
    assert cmp["metrics"]["e2e_ms"]["ci_high_pct"] > -1.5 > cmp["metrics"]["e2e_ms"]["ci_low_pct"]
    assert cmp["metrics"]["denoise_ms"]["verdict"] == "improved"
    assert cmp["metrics"]["denoise_ms"]["ci_high_pct"] < -1.5
    assert cmp["verdict"] == "no_significant_change" and cmp["primary_metric"] == "e2e_ms"
    assert "every round's change is negative" in cmp["rule"] and "-1.5%" in cmp["rule"]
    assert cmp["bootstrap"]["seed"] == stats.DEFAULT_SEED


def test_discarding_outliers_is_explicit_and_changes_the_verdict():
    summary = stats.summarize(seed_cells(), ["eager", "bcg"], "eager", "bcg", discard_outliers=True)
    assert summary["arms"]["bcg"]["discarded_cells"] == [5] and summary["arms"]["bcg"]["n_used"] == 3
    assert summary["arms"]["bcg"]["outliers"][0]["discarded"] is True
    cmp = summary["comparison"]
    assert cmp["discarded_cells"] == [5]
    assert cmp["metrics"]["e2e_ms"]["candidate_mean"] == pytest.approx((4104.417 + 4105.608 + 4115.677) / 3)
    assert cmp["verdict"] == "improved"


def test_bootstrap_is_deterministic_and_seed_dependent():
    cells = seed_cells()
    a = stats.metric_change(cells, "eager", "bcg", "e2e_ms")
    b = stats.metric_change(cells, "eager", "bcg", "e2e_ms")
    c = stats.metric_change(cells, "eager", "bcg", "e2e_ms", seed=1)
    assert a == b and (a["ci_low_pct"], a["ci_high_pct"]) != (c["ci_low_pct"], c["ci_high_pct"])


def test_swapped_arms_regress():
    cmp = stats.metric_change(seed_cells(), "bcg", "eager", "denoise_ms")
    assert cmp["verdict"] == "regressed" and cmp["ci_low_pct"] > 1.5


def cell(i, arm, rnd, e2e, status="valid"):
    return Cell(index=i, arm=arm, round=rnd, status=status,
                perf={"e2e_ms": e2e, "denoise_ms": e2e * 0.9, "stages": {"DenoisingStage": e2e * 0.9}})


def test_rounds_that_disagree_are_not_an_improvement():
    cells = [cell(0, "A", 1, 1000), cell(1, "B", 1, 880), cell(2, "B", 1, 881), cell(3, "A", 1, 1001),
             cell(4, "A", 2, 1000), cell(5, "B", 2, 1010), cell(6, "B", 2, 1011), cell(7, "A", 2, 1001)]
    m = stats.metric_change(cells, "A", "B", "e2e_ms")
    assert m["ci_high_pct"] < -1.5 and m["rounds_same_direction"] is False
    assert m["verdict"] == "no_significant_change" and "rounds disagree" in m["reason"]


def test_insufficient_data():
    one_round = [cell(0, "A", 1, 1000), cell(1, "B", 1, 900), cell(2, "B", 1, 901), cell(3, "A", 1, 1001)]
    m = stats.metric_change(one_round, "A", "B", "e2e_ms")
    assert m["verdict"] == "insufficient_data" and "1 round(s)" in m["reason"]
    assert m["change_pct"] == pytest.approx((900.5 - 1000.5) / 1000.5 * 100)  # still reported, not judged
    invalid = [dataclasses.replace(c, status="invalid") if c.index == 2 else c for c in one_round]
    m = stats.metric_change(invalid, "A", "B", "e2e_ms", min_rounds=1)
    assert m["verdict"] == "insufficient_data" and "1 candidate" in m["reason"]
    assert stats.metric_change(one_round, "A", "B", "e2e_ms", min_rounds=1)["verdict"] == "improved"


def test_invalid_cells_are_not_counted():
    cells = seed_cells()
    cells[5].status = "invalid"
    summary = stats.summarize(cells, ["eager", "bcg"], "eager", "bcg")
    assert summary["arms"]["bcg"]["n_cells"] == 4 and summary["arms"]["bcg"]["n_valid"] == 3
    assert summary["comparison"]["rounds"][1]["candidate_cells"] == [6]


def test_describe():
    assert distribution.describe([]) == {"n": 0, "mean": None, "median": None, "stdev": None, "cv_pct": None,
                                  "min": None, "max": None}
    one = distribution.describe([5.0])
    assert one["stdev"] is None and one["cv_pct"] is None and one["mean"] == 5.0
    d = distribution.describe([1.0, 2.0, 3.0, 10.0])
    assert d["median"] == 2.5 and d["stdev"] == pytest.approx(4.0824829) and d["cv_pct"] == pytest.approx(102.062, 1e-4)


def load_simulation():
    spec = importlib.util.spec_from_file_location("simulate_verdicts", REPO / "benchmarks" / "simulate_verdicts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_simulated_false_positive_and_detection_rates_small():
    """The benchmark runs 1,000 campaigns per scenario; here 150 with fewer resamples, asserted loosely."""
    sim = load_simulation()
    null = sim.verdict_rates(150, 2, 0.5, 0.0, seed=11, resamples=2000)
    assert null["improved"] <= 0.03 and null["regressed"] <= 0.03
    faster = sim.verdict_rates(150, 2, 0.5, -3.0, seed=12, resamples=2000)
    assert faster["improved"] >= 0.9
    noisy = sim.verdict_rates(150, 2, 5.0, -3.0, seed=13, resamples=2000)
    assert noisy["improved"] < 0.5  # at CV 5% a 3% change must not be called reliably: the rule is not a rubber stamp


def test_a_noisy_machine_supports_no_verdict():
    """Seen on a loaded 2-core box: an A/A campaign whose cells ranged from 36 ms to 3.5 s came out 'regressed'
    (+89%) because both rounds happened to be slower in B. A spread that wide supports no claim at all."""
    e2e = [1295.9, 1492.2, 1367.6, 35.6, 1565.0, 3355.6, 3464.0, 2223.8]
    arms = ["a", "a-again", "a-again", "a"] * 2
    cells = [cell(i, arm, 1 + i // 4, v) for i, (arm, v) in enumerate(zip(arms, e2e, strict=True))]
    change = stats.metric_change(cells, "a", "a-again", "e2e_ms")
    assert change["verdict"] == "insufficient_data" and change["reason"].startswith("unstable:")
    assert change["change_pct"] is not None  # the figures are still reported, only the verdict is withheld


def test_a_noisy_aa_campaign_still_reports_its_noise_floor_and_next_step():
    """The same contended A/A: no verdict, but the noise floor and what it would take are always given."""
    e2e = [1295.9, 1492.2, 1367.6, 35.6, 1565.0, 3355.6, 3464.0, 2223.8]
    arms = ["a", "a-again", "a-again", "a"] * 2
    cells = [cell(i, arm, 1 + i // 4, v) for i, (arm, v) in enumerate(zip(arms, e2e, strict=True))]
    comparison = stats.summarize(cells, ["a", "a-again"], "a", "a-again")["comparison"]
    assert comparison["verdict"] == "insufficient_data"
    floor = comparison["metrics"]["e2e_ms"]["noise_floor"]
    a = distribution.describe([e2e[i] for i in (0, 3, 4, 7)])
    assert floor["baseline_cv_pct"] == pytest.approx(a["cv_pct"]) and floor["n_baseline"] == 4
    e2e_change = comparison["metrics"]["e2e_ms"]  # the one interval of the change, there whatever the verdict
    assert e2e_change["ci_low_pct"] < e2e_change["change_pct"] < e2e_change["ci_high_pct"]
    assert e2e_change["interval_reason"] is None and "change_ci_low_pct" not in floor
    # two-sample normal approximation: (z_.975 + z_.80) * sqrt(cv_a^2/n_a + cv_b^2/n_b)
    cv_b = distribution.describe([e2e[i] for i in (1, 2, 5, 6)])["cv_pct"]
    z = 1.959964 + 0.841621
    assert floor["min_detectable_effect_pct"] == pytest.approx(z * (a["cv_pct"] ** 2 / 4 + cv_b ** 2 / 4) ** 0.5, 1e-4)
    needed = floor["samples_per_arm_needed"]
    assert needed == pytest.approx(z ** 2 * (a["cv_pct"] ** 2 + cv_b ** 2) / 1.5 ** 2, abs=1)
    assert floor["more_samples_per_arm"] == needed - 4 and floor["rounds_needed"] == -(-needed // 2)
    # CV 72 % fails the gate, which no number of rounds cures: quiet the host, re-measure; no sample count, and
    # never the --rounds it would take (thousands, above the CLI's limit)
    step = comparison["next_step"]
    assert floor["rounds_needed"] > advice.MAX_ROUNDS
    assert step.startswith("this host is too noisy for a 1.5% threshold (CV 71.6%") and "pin the engine" in step
    assert "re-measure the noise floor with an A/A campaign" in step and "samples per arm" not in step
    assert "--" not in step  # no flag: a larger --threshold-pct does not loosen the CV gate, and the command varies


def _spread_cells(cv_pct, rounds=2, per_round=2):
    """A/B/B/A rounds whose arms each have exactly the given CV (alternating +-d around 1000 ms)."""
    cells, d = [], 1000 * cv_pct / 100
    for r in range(1, rounds + 1):
        for k, arm in enumerate(["A"] * per_round + ["B"] * per_round):
            cells.append(cell(len(cells), arm, r, 1000 + (d if k % 2 else -d)))
    return cells


def test_next_step_gives_rounds_only_when_the_cli_accepts_them():
    """CV 1 %: a 1.5 % verdict needs a few rounds, within --rounds 50, so the count is given; CV 8 % passes the gate
    but needs more than 50 rounds: the host is too noisy, said without a count."""
    near = stats.summarize(_spread_cells(1.2), ["A", "B"], "A", "B")["comparison"]
    floor = near["metrics"]["e2e_ms"]["noise_floor"]
    assert near["verdict"] == "no_significant_change" or near["next_step"] is not None
    reachable = advice.render(sample_size.advice_for({**near["metrics"]["e2e_ms"], "verdict": "insufficient_data"}),
                              advice.BENCH)
    assert 2 <= floor["rounds_needed"] <= advice.MAX_ROUNDS
    assert reachable.startswith(f"re-run with --rounds {floor['rounds_needed']}: ")
    far = stats.summarize(_spread_cells(8.0), ["A", "B"], "A", "B")["comparison"]["metrics"]["e2e_ms"]
    assert far["noise_floor"]["rounds_needed"] > advice.MAX_ROUNDS
    noisy = sample_size.advice_for({**far, "verdict": "insufficient_data"})
    assert noisy["action"] == "quiet_host" and noisy["rounds"] is None
    assert noisy["why"].startswith("this host is too noisy for a 1.5% threshold (CV 9.2%") and "--" not in noisy["why"]


def test_the_seed_campaign_noise_floor_and_no_next_step_when_judged():
    comparison = stats.summarize(seed_cells(), ["eager", "bcg"], "eager", "bcg",
                                 primary_metric="denoise_ms")["comparison"]
    assert comparison["verdict"] == "improved" and comparison["next_step"] is None
    floor = comparison["metrics"]["denoise_ms"]["noise_floor"]
    assert floor["min_detectable_effect_pct"] < 1.0  # CV ~0.2-0.3%: this campaign resolves sub-percent changes
    assert floor["more_samples_per_arm"] == 0


def test_one_cell_per_arm_has_no_floor_but_says_what_to_do():
    cells = [cell(0, "A", 1, 1000), cell(1, "B", 1, 990)]
    comparison = stats.summarize(cells, ["A", "B"], "A", "B")["comparison"]
    assert comparison["metrics"]["e2e_ms"]["noise_floor"]["min_detectable_effect_pct"] is None
    assert comparison["verdict"] == "insufficient_data" and "--rounds 2" in comparison["next_step"]
