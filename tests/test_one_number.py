"""One A/B, one number: for the same cells every surface reports the same change of means and the same interval, to
the precision it prints. Random E2E figures (hypothesis) are put into the real H200 evidence folder's eight cells;
then the bench report (JSON and Markdown), EVIDENCE.md, compare_perf, the sweep merge and the serving verdict are
built from them, each by its own code path, and read back."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import TEST_FIXTURES
from sgl_diffusion_bench.results import perf_compare, report, stats
from sgl_diffusion_bench.judging.cell import Cell
from sgl_diffusion_bench.evidence import manifest, render
from sgl_diffusion_bench.serving import verdict as serving_verdict
from sgl_diffusion_bench.sweep import merge, merge_render
from sgl_diffusion_bench.sweep import spec as sweep_spec

FOLDER = TEST_FIXTURES / "gpu-h200-0.5.23" / "evidence-folder"
REPORT = Path("campaign") / "flux-1gpu__evidence.bench-report.json"
MINI_ENGINE = TEST_FIXTURES / "engine-baselines-mini" / "sglang"
FIXED = {"description": "2 round(s) as planned", "rounds_run": 2, "rule": "fixed"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("one-number") / "evidence"
    shutil.copytree(FOLDER, out)
    return out


def bench_report(e2e: list[float]) -> dict:
    """The kept campaign with these E2E figures (denoise scaled with them), summarised as the runner does."""
    doc = json.loads((FOLDER / REPORT).read_text())
    for cell, value in zip(doc["cells"], e2e, strict=True):
        ratio = value / cell["perf"]["e2e_ms"]
        cell["perf"]["e2e_ms"], cell["perf"]["denoise_ms"] = value, cell["perf"]["denoise_ms"] * ratio
    camp = doc["campaign"]
    camp["stopping"] = copy.deepcopy(FIXED)
    cells = [Cell.from_json(c) for c in doc["cells"]]
    fresh = stats.summarize(cells, list(camp["arms"]), camp["baseline_arm"], camp["candidate_arm"],
                            threshold_pct=camp["threshold_pct"], primary_metric=camp["primary_metric"])
    doc["summary"].update(arms=fresh["arms"], comparison=fresh["comparison"])
    return doc


def printed(change: float, low: float, high: float, digits: int) -> tuple[str, str, str]:
    return f"{change:+.{digits}f}%", f"{low:+.{digits}f}%", f"{high:+.{digits}f}%"


E2E = st.lists(st.floats(min_value=2000.0, max_value=6000.0, allow_nan=False, allow_infinity=False),
               min_size=8, max_size=8)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(e2e=E2E)
def test_every_surface_reports_the_same_change_and_interval(folder, e2e):
    doc = bench_report(e2e)
    comparison = doc["summary"]["comparison"]
    figures = comparison["metrics"]["e2e_ms"]
    change, low, high = figures["change_pct"], figures["ci_low_pct"], figures["ci_high_pct"]
    assert low is not None and high is not None and figures["interval_reason"] is None  # 3+ cells an arm
    assert low <= change <= high or figures["verdict"] == "insufficient_data"
    three = printed(change, low, high, 3)
    expected = f"{three[0]} (95% interval [{three[1]}, {three[2]}])"

    # the bench report's Markdown: the means line and the statistics table
    markdown = report.render_markdown(doc)
    assert f"change {expected}" in markdown
    assert f"| {three[0]} | [{three[1]}, {three[2]}] |" in markdown

    # EVIDENCE.md's headline, from the folder's own campaign report
    (folder / REPORT).write_text(json.dumps(doc))
    evidence = render.render_markdown(folder, manifest.load(folder))
    assert f"- e2e_ms change {expected} (eager -> bcg" in evidence

    # compare_perf over the same cells (the same steady state: each warm engine's first request set apart)
    cells = [Cell.from_json(c) for c in doc["cells"]]
    compared = perf_compare.compare_cells(cells, "eager", "bcg")["statistics"]["metrics"]["e2e_ms"]
    assert (compared["change_pct"], compared["ci_low_pct"], compared["ci_high_pct"]) == (change, low, high)
    assert f"| {three[0]} | [{three[1]}, {three[2]}] |" in "\n".join(perf_compare.render_statistics(
        perf_compare.compare_cells(cells, "eager", "bcg")["statistics"], doc["summary"]["arms"]))

    # the sweep merge of a shard whose result is this report
    shard = sweep_spec.expand({"schema": "sweep-spec.v1", "presets": {"names": ["tiny-flux-cpu"]}}, "s.yaml").shards[0]
    result = folder / "sweep" / "shards" / shard.id / "result.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    result.write_text(json.dumps(doc))
    found = {"status": "done", "reason": None, "attempts": 1, "state": {}}
    row = merge.shard_row(folder / "sweep", shard, found, str(MINI_ENGINE))
    two = printed(change, low, high, 2)
    assert merge_render.change_cell(row) == f"{two[0]} (95% interval [{two[1]}, {two[2]}])"

    # the serving verdict over blocks holding the same figures (seconds), A1 B1 B2 A2 per round
    used = stats.used_cells(cells)
    blocks = [{"arm": {"eager": "A", "bcg": "B"}[c.arm], "round": c.round, "position": c.position,
               "metrics": {"latency_p50": c.perf["e2e_ms"] / 1000, "latency_p99": c.perf["e2e_ms"] / 1000,
                           "throughput_qps": 1000 / c.perf["e2e_ms"], "failed_requests": 0}} for c in used]
    served = serving_verdict.compare(blocks, threshold_pct=1.5, resamples=stats.DEFAULT_RESAMPLES,
                                     seed=stats.DEFAULT_SEED, confidence=0.95, min_rounds=2)["latency_p50"]
    assert printed(served["change_pct"], served["ci_low_pct"], served["ci_high_pct"], 2) == two
