"""Output identity is part of validity, and invalid cells carry no numbers: judged on the seed PR's recorded
campaign (tests/fixtures/bench-report/example.json, eager vs BCG, A/B/B/A) and on recorded real engine runs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import TEST_FIXTURES
from sgl_diffusion_bench import contract, fileio, presets
from sgl_diffusion_bench.engine import capabilities
from sgl_diffusion_bench.campaign import bench_runner, campaign_context, design
from sgl_diffusion_bench.judging import log_gates, log_markers, quality, request_path, validity
from sgl_diffusion_bench.results import report, stats
from sgl_diffusion_bench.judging.cell import Cell

EXAMPLE = TEST_FIXTURES / "bench-report" / "example.json"
CPU = TEST_FIXTURES / "engine-cpu-0.5.10"
V23_LEVELS = ("exact", "lossless", "high", "extra-high")


def example() -> dict:
    return json.loads(EXAMPLE.read_text())


def cells_of(doc: dict) -> list[Cell]:
    return [Cell.from_json(c) for c in doc["cells"]]


def judged_summary(doc: dict, engine_levels=None) -> dict:
    """The runner's judging of the report's cells; the judged cells are written back into ``doc``."""
    c = doc["campaign"]
    cells = cells_of(doc)
    output_quality = validity.apply_output_checks(cells, c["arms"], c["baseline_arm"], engine_levels)
    summary = stats.summarize(cells, list(c["arms"]), c["baseline_arm"], c["candidate_arm"],
                              primary_metric="denoise_ms")  # the seed PR's claim: denoise ~5% faster
    summary["output_quality"] = output_quality
    validity.apply_to_comparison(summary["comparison"], output_quality)
    doc["cells"] = [cell.to_json() for cell in cells]
    return summary


def test_the_recorded_campaign_is_improved_while_its_bytes_agree():
    doc = example()
    summary = judged_summary(doc)
    assert summary["comparison"]["verdict"] == "improved"
    assert all(c["status"] == "valid" for c in doc["cells"]) and validity.exit_reason(cells_of(doc)) == "success"


def test_bcg_bytes_differing_from_eager_can_never_read_improved():
    doc = example()
    odd = "f" * 64
    doc["cells"][2]["outputs"][0]["sha256"] = odd  # round 1 B2 (bcg) wrote other bytes
    reference = doc["cells"][0]["outputs"][0]["sha256"]
    summary = judged_summary(doc)
    cell = doc["cells"][2]
    assert cell["status"] == "invalid" and cell["perf"] is None and cell["perf_dump_path"]
    reason = next(r for r in cell["reasons"] if r.startswith(quality.IDENTITY_REASON))
    assert odd in reason and reference in reason and "comparator cell 0 (eager)" in reason
    comparison = summary["comparison"]
    assert comparison["verdict"] == "outputs_differ"
    assert {m["verdict"] for m in comparison["metrics"].values()} == {"outputs_differ"}
    assert validity.exit_reason(cells_of(doc)) == "outputs_differ"
    # idempotent: judging again (the runner does after every cell) keeps one reason, the same verdict
    again = judged_summary(doc)
    assert again["comparison"]["verdict"] == "outputs_differ" and len(doc["cells"][2]["reasons"]) == 1
    full = {**doc, "summary": summary}
    assert contract.validation_errors(full, "bench-report.v1") == []
    markdown = report.render_markdown(full, plot_name=None)
    assert "| improved |" not in markdown and ": improved**" not in markdown  # (the rule's words name it)
    assert "Outputs differ: no performance verdict" in markdown and ": outputs_differ**" in markdown
    assert "reductions are" not in markdown


def test_unstable_eager_bytes_invalidate_every_cell_of_that_level():
    doc = example()
    doc["cells"][3]["outputs"][0]["sha256"] = "e" * 64  # round 1 A2: eager against itself
    summary = judged_summary(doc)
    assert summary["comparison"]["verdict"] == "outputs_differ"
    assert {c["status"] for c in doc["cells"]} == {"invalid"}  # bcg cells too: nothing stable to compare with
    assert all(c["perf"] is None for c in doc["cells"])
    reason = doc["cells"][5]["reasons"][0]
    assert reason.startswith(quality.IDENTITY_REASON) and "arm eager is unstable" in reason and "cell(s) 3" in reason
    assert validity.exit_reason(cells_of(doc)) == "outputs_differ"


def test_one_level_unstable_leaves_the_other_level_counted():
    doc = example()
    arms = doc["campaign"]["arms"]
    assert set(arms) == {"eager", "bcg"}
    arms["bcg"]["quality"] = "exact"  # two identity levels on 0.5.23: eager lossless, bcg exact
    eager = [c for c in doc["cells"] if c["arm"] == "eager"]
    eager[1]["outputs"][0]["sha256"] = "e" * 64
    judged_summary(doc, V23_LEVELS)
    assert {c["status"] for c in doc["cells"] if c["arm"] == "eager"} == {"invalid"}
    assert {c["status"] for c in doc["cells"] if c["arm"] == "bcg"} == {"valid"}


def test_the_ledger_accepts_the_outputs_differ_exit_reason():
    schema = contract.load_schema("cleanup-ledger.v1")
    assert validity.EXIT_OUTPUTS_DIFFER in schema["properties"]["exit_reason"]["enum"]


@pytest.mark.parametrize("levels, level, semantics, canonical", [
    (V23_LEVELS, "exact", quality.BIT_EXACT, "exact"),
    (V23_LEVELS, "lossless", quality.SAME_MATH, "lossless"),
    (V23_LEVELS, "extra-high", quality.SAME_MATH, "lossless"),  # 0.5.23: an alias of lossless
    (V23_LEVELS, "high", quality.LOSSY, "high"),
    (("lossless", "extra-high", "high"), "lossless", quality.BIT_EXACT, "lossless"),
    (("lossless", "extra-high", "high"), "extra-high", quality.LOSSY, "extra-high"),
    (None, None, quality.BIT_EXACT, "lossless"),
    (V23_LEVELS, None, quality.SAME_MATH, "lossless"),  # the builder pins --quality=lossless on 0.5.23
])
def test_levels_are_judged_by_what_the_release_promises(levels, level, semantics, canonical):
    assert quality.level_semantics(level, levels) == semantics
    assert quality.canonical_level(level, levels) == canonical


def test_an_alias_arm_must_match_its_canonical_level_bytes():
    doc = example()
    arms = {"eager": {"quality": "lossless"}, "bcg": {"quality": "extra-high"}}
    cells = cells_of(doc)
    cells[1].outputs[0]["sha256"] = "a" * 64
    result = validity.apply_output_checks(cells, arms, "eager", V23_LEVELS)
    [identity] = result["checks"]
    assert identity["level"] == "lossless" and identity["arms"] == ["eager", "bcg"]
    assert [m["cell"] for m in identity["mismatches"]] == [1] and cells[1].status == "invalid"


def _png(path: Path, array: np.ndarray) -> dict:
    Image.fromarray(array).save(path)
    return {"path": str(path), "sha256": fileio.sha256_file(path), "bytes": path.stat().st_size}


def test_a_lossy_arm_below_the_thresholds_is_invalid(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)
    noisy = np.clip(base.astype(int) + rng.integers(-90, 90, base.shape), 0, 255).astype(np.uint8)
    cells = [Cell(index=0, arm="eager", status="valid", perf={"e2e_ms": 1.0},
                  outputs=[_png(tmp_path / "ref.png", base)]),
             Cell(index=1, arm="fast", status="valid", perf={"e2e_ms": 0.5},
                  outputs=[_png(tmp_path / "fast.png", noisy)])]
    result = validity.apply_output_checks(cells, {"eager": {"quality": "exact"}, "fast": {"quality": "high"}},
                                          "eager", V23_LEVELS)
    assert not result["passed"] and cells[1].status == "invalid" and cells[1].perf is None
    assert cells[1].reasons[0].startswith(quality.QUALITY_REASON)


def test_the_worst_frame_is_gated_not_only_reported(tmp_path):
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 255, (48, 48, 3), dtype=np.uint8) for _ in range(12)]
    broken = [f.copy() for f in frames]
    broken[5] = np.clip(broken[5].astype(int) + rng.integers(-60, 60, broken[5].shape), 0, 255).astype(np.uint8)
    for name, video in (("ref.gif", frames), ("test.gif", broken)):
        Image.fromarray(video[0]).save(tmp_path / name, save_all=True, append_images=[Image.fromarray(f) for f in
                                                                                      video[1:]], duration=100)
    r = quality.compare_media(tmp_path / "ref.gif", tmp_path / "test.gif")
    limits = quality.DEFAULT_THRESHOLDS["video"]
    assert r["worst_frame"]["index"] == 5 and r["worst_frame"]["ssim"] < limits.ssim_min
    assert r["ssim"] >= limits.ssim_min  # the mean alone would pass ...
    assert r["passed"] is False  # ... the broken frame does not


def test_a_fallback_run_with_a_perf_dump_carries_no_numbers(tmp_path):
    markers = log_markers.markers_for_version("0.5.10.post1")
    verdict = log_gates.scan_log((CPU / "fallback-auto" / "log.txt").read_text(), markers, require_native=True)
    png = tmp_path / "y.png"
    png.write_bytes(b"\x89PNG real bytes")
    judged = request_path.judge_request(verdict=verdict, returncode=0, stop_reason=None,
                                        perf_dump_path=CPU / "fallback-auto" / "perf.json", output_paths=[png],
                                        memory_kind="process_rss")
    assert judged.status == "invalid" and judged.perf is None


def test_an_invalid_row_shows_no_figure_in_the_evidence_table():
    doc = example()
    cell = doc["cells"][5]  # round 2 B1, e2e 4.385315 s
    cell["status"], cell["reasons"] = "invalid", ["backend.diffusers_fallback: recorded with its numbers"]
    markdown = report.render_markdown(doc, plot_name=None)
    row = next(line for line in markdown.splitlines() if line.startswith("| Round 2 — B1"))
    assert "4.385315" not in row and "invalid" in row


def test_the_runner_report_judges_outputs_before_statistics(tmp_path):
    """The wired runner: a campaign whose BCG cell wrote other bytes reports outputs_differ, never improved."""
    preset = presets.get_preset("tiny-flux-cpu")
    caps = capabilities.recent_engine_capabilities()
    settings = campaign_context.CampaignSettings(label="identity", output_root=tmp_path, primary_metric="denoise_ms")
    ctx = campaign_context.CampaignContext.build(preset, design.plan("abba", rounds=2), settings, caps,
                                                 model_path=str(tmp_path / "model"))
    runner = bench_runner.CampaignRunner(ctx, asset_filenames={})
    recorded = example()["cells"]
    for cell, seen in zip(runner.cells, recorded, strict=True):
        for key in ("status", "reasons", "perf", "outputs", "wall_s"):
            setattr(cell, key, copy.deepcopy(seen[key]))
    assert runner.report()["summary"]["comparison"]["verdict"] == "improved"
    runner.cells[6].outputs[0]["sha256"] = "0" * 64
    doc = runner.report()
    assert doc["summary"]["comparison"]["verdict"] == "outputs_differ" and not doc["ok"]
    assert runner.cells[6].status == "invalid" and doc["cells"][6]["status"] == "invalid"
    assert contract.validation_errors(doc) == []
