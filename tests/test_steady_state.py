"""First request vs steady state (issue 25, build 4): each warm engine's first measured request is reported beside
the steady state, and the statistics and the verdict are on the steady state. Real figures: an A/B/B/A campaign of
two warm engines whose baseline engine's first measured request took 8.4 s (a first-request compile) against a
steady ~4.21 s, as the H200 fixture's engines served."""

from __future__ import annotations

import pytest

from sgl_diffusion_bench.campaign import sequential
from sgl_diffusion_bench.results import stats, steady_state
from sgl_diffusion_bench.judging.cell import Cell

PLAN = [("eager", 1, 8431.2), ("bcg", 1, 4216.1), ("bcg", 1, 4214.2), ("eager", 1, 4216.0),
        ("eager", 2, 4214.0), ("bcg", 2, 4206.0), ("bcg", 2, 4205.0), ("eager", 2, 4213.0)]


def _cells(warm: bool = True, engines=("e1", "e2")) -> list[Cell]:
    out, seen = [], set()
    for index, (arm, rnd, e2e) in enumerate(PLAN):
        engine = engines[0] if arm == "eager" else engines[1]
        served = {"id": engine, "first_measured": engine not in seen, "recaptures": 0} if warm else None
        seen.add(engine)
        out.append(Cell(index=index, arm=arm, round=rnd, status="valid", engine=served,
                        perf={"e2e_ms": e2e, "denoise_ms": e2e - 40.0, "stages": {"DenoisingStage": e2e - 40.0}}))
    return out


def _summary(cells):
    return stats.summarize(cells, ["eager", "bcg"], "eager", "bcg")


def test_a_slow_first_request_is_reported_beside_the_steady_state_and_left_out_of_the_verdict():
    summary = _summary(_cells())
    comparison, eager = summary["comparison"], summary["arms"]["eager"]
    assert comparison["steady_state"]["excluded_cells"] == [0, 1]
    assert eager["first_requests"] == [{"cell": 0, "engine": "e1", "e2e_ms": 8431.2, "denoise_ms": 8391.2,
                                        "in_steady_state": False}]
    assert eager["n_valid"] == 4 and eager["n_used"] == 3
    assert eager["e2e_ms"]["mean"] == pytest.approx((4216.0 + 4214.0 + 4213.0) / 3)
    e2e = comparison["metrics"]["e2e_ms"]
    assert comparison["verdict"] == "no_significant_change"
    assert e2e["change_pct"] == pytest.approx(-0.1408, abs=1e-4)
    assert e2e["ci_low_pct"] == pytest.approx(-0.1566, abs=1e-4)
    assert e2e["ci_high_pct"] == pytest.approx(-0.1250, abs=1e-4)
    markdown = steady_state.markdown(summary, ["eager", "bcg"])
    assert "| eager | e1 | cell 0 | 8.431200 | 8.391200 | 4.214333 over 3 | no |" in markdown
    assert "| bcg | e2 | cell 1 | 4.216100 | 4.176100 | 4.208400 over 3 | no |" in markdown
    assert "the verdict and the statistics are on the steady state" in markdown[0]


def test_counted_inside_the_steady_state_the_same_first_request_would_leave_no_verdict():
    """A cold campaign (every cell its own engine, no warm engine recorded) keeps every valid cell: the same figures
    there make the baseline's spread fail the CV gate."""
    summary = _summary(_cells(warm=False))
    comparison = summary["comparison"]
    assert comparison["steady_state"]["excluded_cells"] == [] and summary["arms"]["eager"]["first_requests"] == []
    assert summary["arms"]["eager"]["n_used"] == 4
    assert comparison["verdict"] == "insufficient_data" and "CV 40.0%" in comparison["metrics"]["e2e_ms"]["reason"]
    assert steady_state.markdown(summary, ["eager", "bcg"]) == []


def test_the_until_verdict_looks_are_on_the_steady_state_too():
    rule = sequential.StoppingRule(1.5, 6, 2, 0.95, metric="e2e_ms")
    warm = sequential.look(rule, _cells(), "eager", "bcg", 2)
    cold = sequential.look(rule, _cells(warm=False), "eager", "bcg", 2)
    assert warm["cv_pct"] == pytest.approx(0.1199, abs=1e-3) and cold["cv_pct"] == pytest.approx(40.02, abs=1e-2)
    for look, cells in ((warm, _cells()), (cold, _cells(warm=False))):  # the one change every surface reports
        assert look["change_pct"] == pytest.approx(stats.metric_change(cells, "eager", "bcg", "e2e_ms")["change_pct"])
    assert warm["change_pct"] == pytest.approx(-0.1408, abs=1e-3)


def test_an_engine_that_served_one_request_of_an_arm_keeps_it():
    """Alternating blocks: an engine that served one request of the arm has no steady state to set it apart from."""
    cells = _cells()
    cells[0].engine["id"] = "e0"  # cell 0 alone on its own engine; e1's first is then cell 3
    cells[3].engine["first_measured"] = True
    summary = _summary(cells)
    assert summary["comparison"]["steady_state"]["excluded_cells"] == [1, 3]
    assert [(f["cell"], f["in_steady_state"]) for f in summary["arms"]["eager"]["first_requests"]] == \
        [(0, True), (3, False)]
    assert summary["arms"]["eager"]["n_used"] == 3


def test_an_invalid_first_request_sets_nothing_apart():
    cells = _cells()
    cells[0].status = "failed"
    summary = _summary(cells)
    assert summary["comparison"]["steady_state"]["excluded_cells"] == [1]
    assert summary["arms"]["eager"]["first_requests"] == [] and summary["arms"]["eager"]["n_used"] == 3
