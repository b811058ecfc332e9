"""Eager against BCG served on a real H200 with sglang 0.5.23 (fixture tests/fixtures/gpu-h200-0.5.23/serving/,
recorded by tests/gpu_harness/run_h200_0523.sh, part ``serving``: tests/gpu_harness/serving_part.sh). Two real
`sglang serve` processes on the one GPU, the FLUX.1-dev-shaped random model at 1024x1024 and 28 steps, the same seeded
trace at two request rates (and concurrency 1) in A1 B1 B2 A2 blocks. These tests assert what the kept report shows:
it validates against serving-report.v1, both arms are valid and BCG really captured in arm B, every figure comes from
the per-request latencies the report lists (recomputed here with the standard library, not the tool's code), and the
servers' log excerpts agree with the gates.

The tests skip while the fixture folder is absent (it is added after the GPU run). SERVING_FIXTURE=DIR points them at
another folder of the same layout (serving_part.sh collect DIR), e.g. a CPU dry run of the part, where the BCG check
fails as it should."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import pytest

from conftest import TEST_FIXTURES
from sgl_diffusion_bench import contract

FIXTURE = Path(os.environ.get("SERVING_FIXTURE") or TEST_FIXTURES / "gpu-h200-0.5.23" / "serving")
REPORT = FIXTURE / "serving-report.json"
pytestmark = pytest.mark.skipif(not REPORT.is_file(), reason=f"no serving fixture yet: {REPORT} is absent (made by "
                                "tests/gpu_harness/run_h200_0523.sh PARTS=serving on a lent H200)")
BCG_FLAG = "--enable-breakable-cuda-graph"


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return json.loads(REPORT.read_text(encoding="utf-8"))


def _quantile(values: list[float], pct: int) -> float:
    """numpy's linear percentile (bench_serving's), from the standard library's inclusive quantiles."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


def test_report_validates_and_both_arms_are_valid(doc):
    assert doc["schema"] == "serving-report.v1" and contract.validation_errors(doc) == []
    assert doc["ok"] is True and doc["status"] == "valid" and doc["reasons"] == []
    for arm in ("A", "B"):
        assert doc["arms"][arm]["status"] == "valid" and doc["arms"][arm]["reasons"] == []
        assert doc["arms"][arm]["gates"]["valid"] and doc["arms"][arm]["gates"]["native_evidence"]
        assert doc["arms"][arm]["gates"]["fallback"] is None
    # what the step printed on stdout is the report the tool wrote
    stdout = FIXTURE / "serving.json"
    if stdout.is_file():
        assert json.loads(stdout.read_text(encoding="utf-8"))["load_points"] == doc["load_points"]


def test_arm_b_is_bcg_and_captured_arm_a_is_eager(doc):
    a, b = doc["arms"]["A"], doc["arms"]["B"]
    assert BCG_FLAG in b["args"] and BCG_FLAG not in a["args"], "arm B must be the BCG server, arm A eager"
    assert b["gates"]["bcg"]["expected"] is True and b["gates"]["bcg"]["capture_seen"] is True, \
        "arm B's log gate does not say BCG captured"
    assert b["gates"]["bcg"]["captured_graphs"] >= 1 and b["gates"]["bcg"]["invalid_signals"] == []
    assert a["gates"]["bcg"]["expected"] is False and a["gates"]["bcg"]["capture_seen"] is False
    # everything but BCG is the same server configuration
    assert [t for t in b["args"] if t != BCG_FLAG][:len(a["args"])] == a["args"]
    excerpt = FIXTURE / "server-b.log-excerpt.txt"
    if excerpt.is_file():
        assert "[Diffusion BCG] captured" in excerpt.read_text(encoding="utf-8", errors="replace")


def test_two_request_rates_each_with_four_blocks_of_the_same_trace(doc):
    rates = [p["load"]["value"] for p in doc["load_points"] if p["load"]["kind"] == "request_rate"]
    assert len(rates) >= 2 and len(set(rates)) == len(rates)
    for point in doc["load_points"]:
        assert [b["position"] for b in point["blocks"]] == ["A1", "B1", "B2", "A2"]
        planned = point["load"]["planned_requests"]
        for block in point["blocks"]:
            assert len(block["requests"]) == planned and all(r["success"] for r in block["requests"])
            assert all(r["output_sha256"] and r["latency"] > 0 for r in block["requests"])
            if point["load"]["kind"] == "request_rate":
                assert [r["scheduled_s"] for r in block["requests"]] == pytest.approx(point["load"]["arrivals_s"])


def test_percentiles_are_those_of_the_stored_latencies(doc):
    for point in doc["load_points"]:
        for arm in ("A", "B"):
            blocks = [b for b in point["blocks"] if b["arm"] == arm]
            latencies = [r["latency"] for b in blocks for r in b["requests"] if r["success"]]
            figures = point["arms"][arm]
            assert figures["completed_requests"] == len(latencies) and figures["failed_requests"] == 0
            for pct in (50, 90, 95, 99):
                assert figures[f"latency_p{pct}"] == pytest.approx(_quantile(latencies, pct), rel=1e-9), (
                    point["label"], arm, pct)
            assert figures["latency_mean"] == pytest.approx(statistics.fmean(latencies), rel=1e-9)
            duration = sum(b["metrics"]["duration"] for b in blocks)
            assert figures["throughput_qps"] == pytest.approx(len(latencies) / duration, rel=1e-9)
            for block in blocks:  # and each block's own figures
                own = [r["latency"] for r in block["requests"] if r["success"]]
                assert block["metrics"]["latency_p50"] == pytest.approx(_quantile(own, 50), rel=1e-9)
                assert block["metrics"]["latency_p99"] == pytest.approx(_quantile(own, 99), rel=1e-9)


def test_each_comparison_states_its_verdict_and_noise_floor(doc):
    for point in doc["load_points"]:
        assert set(point["comparison"]) == {"latency_p50", "latency_p99", "throughput_qps"}
        for change in point["comparison"].values():
            assert change["verdict"] in ("improved", "regressed", "no_significant_change", "insufficient_data")
            assert "noise_floor" in change
    assert (FIXTURE / "report.md").read_text(encoding="utf-8").startswith("# Serving A/B")
    plot = FIXTURE / "latency_vs_rate.png"
    assert plot.is_file() and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_kept_markdown_is_what_the_report_renders_to_in_one_unit(doc):
    from sgl_diffusion_bench.serving import render

    text = render.markdown(doc)
    assert (FIXTURE / "report.md").read_text(encoding="utf-8") == text
    assert "percentiles pooled over every request of the arm" in text and " ms" not in text  # seconds throughout
    point = doc["load_points"][0]
    shape = point["shapes"][0]
    assert f"| {shape['baseline_p50_ms'] / 1000:.3f} | {shape['candidate_p50_ms'] / 1000:.3f} |" in text
    for m in point["arms"].values():  # rates with the digits that tell two arms apart
        assert f"| {m['throughput_qps']:.4g} |" in text
    c = point["comparison"]["latency_p50"]
    assert c["ci_low_pct"] is not None and f"[{c['ci_low_pct']:+.2f}%, {c['ci_high_pct']:+.2f}%]" in text


def test_a_plot_of_concurrency_alone_is_drawn(doc, tmp_path):
    from sgl_diffusion_bench.serving import render

    only = {**doc, "load_points": [p for p in doc["load_points"] if p["load"]["kind"] != "request_rate"]}
    assert only["load_points"] and render.plot(only, tmp_path / "p.png").stat().st_size > 1000


def test_identity_differences_are_told_per_arm_with_what_they_mean():
    from sgl_diffusion_bench.serving import metrics, render

    within = metrics.output_identity({"A": {"q1": {"a"}, "q2": {"c"}}, "B": {"q1": {"a", "b"}, "q2": {"c"}}})
    assert within["unstable_within_arm"] == {"A": [], "B": ["q1"]} and within["differ_between_arms_only"] == []
    line = render._identity_line({"label": "rate 1/s", "output_identity": within})
    assert "arm B wrote different bytes for the same request across its own blocks (q1)" in line
    assert "arm A" not in line and "latency only" in line
    between = metrics.output_identity({"A": {"q1": {"a"}}, "B": {"q1": {"b"}}})
    assert between["differ_between_arms_only"] == ["q1"] and not between["identical"]
    assert "the change alters the output" in render._identity_line({"label": "c1", "output_identity": between})
